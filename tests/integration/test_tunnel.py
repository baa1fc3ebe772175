"""CONNECT tunnel integrity: 100 MiB each way at once, sha256 checked at both
ends, with splice on (auto) and off; half-close; parallel tunnels."""

import os
import socket
import threading
import time

from tests.integration.harness import base
from tests.integration.harness.client import bulk_transfer
from tests.integration.harness.wait import LIVENESS_S

MIB = 1 << 20
BIG = int(os.environ.get("VIBEPIT_IT_TUNNEL_MIB", "100")) * MIB


class TunnelMixin:
    splice = None

    @classmethod
    def setUpClass(cls):
        cls.proxy_config = {"allow_http": ["allowed.test:9000", "allowed.test:443"], "splice": cls.splice,
                            "idle_timeout_ms": 10000}
        super().setUpClass()

    def bulk(self, n_down, n_up, seed, until_eof=False, timeout=60):
        c, resp = self.tunnel("allowed.test:9000", timeout=timeout)
        self.assertStatus(resp, 200)
        self.assertEqual(c.buf, b"", "bytes after the 200 before the upstream spoke")
        t0 = time.monotonic()
        res = bulk_transfer(c.sock, n_down, n_up, seed=seed, until_eof=until_eof)
        res["seconds"] = time.monotonic() - t0
        c.close()
        return res

    def test_100mib_both_directions(self):
        res = self.bulk(BIG, BIG, seed=11)
        self.assertTrue(res["ok"], "%s%s" % (res, self.diag()))
        mbps = 2 * BIG / MIB / max(res["seconds"], 1e-6)
        print("\n  splice=%s: %d MiB each way in %.2fs (%.0f MiB/s total)"
              % (self.splice, BIG // MIB, res["seconds"], mbps))
        recs = self.proxy.wait_records(lambda r: r.get("event") == "close" and str(r.get("port")) == "9000"
                                       and r.get("bytes_down", 0) >= BIG)
        self.assertTrue(recs, "no close record with the byte counts%s" % self.diag())
        self.assertGreaterEqual(recs[-1]["bytes_up"], BIG)

    def test_half_close_propagates(self):
        """Client EOF reaches the upstream; the upstream's answer still comes back."""
        res = self.bulk(MIB, 3 * MIB + 7, seed=12, until_eof=True)
        self.assertTrue(res["ok"], "%s%s" % (res, self.diag()))

    def test_upstream_close_reaches_client(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        c.send(b"bye")
        self.assertEqual(c.recv_exact(3), b"bye")
        c.sock.shutdown(socket.SHUT_WR)      # echo half-closes back on our EOF
        self.assertEqual(c.read_to_eof(timeout=LIVENESS_S), b"", self.diag())

    def test_splice_switch_is_wired(self):
        """splice=auto relays through pipes (socket -> pipe -> socket); splice=off never makes one."""
        def pipes():
            fd_dir = "/proc/%d/fd" % self.proxy.proc.pid
            n = 0
            for f in os.listdir(fd_dir):
                try:
                    n += os.readlink(os.path.join(fd_dir, f)).startswith("pipe:")
                except OSError:
                    pass
            return n
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        c.send(b"s" * 100000)
        self.assertEqual(len(c.recv_exact(100000)), 100000)
        if self.splice == "off":
            self.assertEqual(pipes(), 0, "splice=off but the proxy holds pipes")
        else:
            self.assertGreater(pipes(), 0, "splice=auto but no pipe is open during a tunnel")

    def test_parallel_tunnels(self):
        results, errors = [], []

        def one(i):
            try:
                results.append(self.bulk(4 * MIB, 2 * MIB + i, seed=100 + i, timeout=30))
            except Exception as e:   # reported below
                errors.append(repr(e))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [], self.diag())
        self.assertEqual(len(results), 8)
        for r in results:
            self.assertTrue(r["ok"], r)


class SpliceAutoTest(TunnelMixin, base.TopologyCase):
    splice = "auto"


class SpliceOffTest(TunnelMixin, base.TopologyCase):
    splice = "off"


if __name__ == "__main__":
    base.main()
