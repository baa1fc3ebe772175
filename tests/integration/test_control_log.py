"""The decision records through the control API and in the file, against the real
vibepit-proxy:

- a reader that falls behind a small ring is told how many records it lost;
- a follower that stays while the proxy stops gets every record, then the final counters;
- the decision log under faults: a full disk (records counted as unwritten, writing
  resumes) and an outside rotation (SIGHUP reopens the file).
"""

import json
import os
import re
import signal
import subprocess

from tests.integration.harness import base
from tests.integration.harness.control import ControlConn
from tests.integration.harness.wait import poll, wait_until
from tests.integration.test_control import CHOST, ControlCase, control_config


class SlowFollower(ControlCase):
    """A small ring: records a reader has not fetched in time are reported as lost."""

    @classmethod
    def start_control(cls):
        cls.session_dir = os.path.join(cls.topo.tmp, "sess")
        return cls.make_proxy(**control_config(), decision_ring=20,
                              extra_args=["--session-dir", cls.session_dir])

    def test_loss_is_counted(self):
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(c.close)
        start = c.request("GET", "/v1/decisions?limit=1000").json()["next"]
        for i in range(60):
            conn, resp = self.tunnel("flood%d.test:443" % i)
            conn.close()
        got = poll(lambda: c.request("GET", "/v1/decisions?after=%d&limit=1000" % start).json(),
                   lambda got: got["next"] >= start + 60)
        self.assertEqual(got["lost"], 40, got)
        self.assertEqual(len(got["records"]), 20)


class FollowerToTheEnd(base.TopologyCase):
    """A decision follower that stays while the proxy stops gets every record, those the
    drain writes included, then the proxy's final counters and the end of the stream:
    vibepit ci knows from this that its report holds everything (docs/ci.md)."""

    ipv6 = False

    @staticmethod
    def read_stream_to_its_end(c):
        """The chunked body's lines, until the zero-size chunk; fails on a cut stream."""
        body = b""
        while True:
            while b"\r\n" not in c.buf:
                c._fill()
            size_text, rest = c.buf.split(b"\r\n", 1)
            size = int(size_text, 16)
            while len(rest) < size + 2:
                c._fill()
                rest = c.buf.split(b"\r\n", 1)[1]
            body += rest[:size]
            c.buf = rest[size + 2:]
            if size == 0:
                return [line for line in body.decode().split("\n") if line]

    def test_a_stopping_proxy_ends_the_stream_with_its_counters(self):
        sd = os.path.join(self.topo.tmp, "s-follow")
        p = self.start_proxy(**control_config(), decision_log_per_client=0, drain_timeout_ms=300,
                             allow_http=["allowed.test:443"], extra_args=["--session-dir", sd])
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, p.control_listeners[0][1], sd)
        self.addCleanup(c.close)
        c.sock.sendall(b"GET /v1/decisions?follow=1&after=0 HTTP/1.1\r\nHost: control\r\n\r\n")
        while b"\r\n\r\n" not in c.buf:
            c._fill()
        head, c.buf = c.buf.split(b"\r\n\r\n", 1)
        self.assertIn(b"Transfer-Encoding: chunked", head)
        for i in range(5):
            conn, resp = self.tunnel("denied%d.test:443" % i, proxy=p)
            self.assertStatus(resp, 403)
            conn.close()
        # Left open: the drain closes it, and its close record is written while the proxy stops.
        held, resp = self.tunnel("allowed.test:443", proxy=p)
        self.assertStatus(resp, 200)
        self.assertEqual(p.stop(), 0, p.diag())
        lines = self.read_stream_to_its_end(c)
        recs = [json.loads(line) for line in lines]
        end = recs[-1]
        self.assertEqual(end.get("end"), True, lines[-3:])
        seqs = [r["seq"] for r in recs[:-1]]
        self.assertEqual(seqs, list(range(1, end["last"] + 1)))   # every record, in order
        self.assertEqual((end["dropped"], end["unwritten"]), (0, 0))
        events = [(r.get("host"), r.get("event")) for r in recs[:-1]]
        self.assertEqual(sum(1 for e in events if e[1] == "decision"), 6, events)
        self.assertIn(("allowed.test", "close"), events)


class LogFaultTest(base.TopologyCase):
    """The decision log under faults: a full disk costs the file its records, counted in
    /metrics, while the proxy keeps serving, and writing resumes when space returns; SIGHUP
    reopens the file after an outside rotation."""

    def small_disk(self, kib):
        d = os.path.join(self.topo.tmp, "disk-%s" % self.id().rsplit(".", 1)[-1])
        os.makedirs(d)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dk,mode=0755" % kib, "tmpfs", d],
                       check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", d], check=False)
        return d

    def control_proxy(self, log_path):
        sd = os.path.join(self.topo.tmp, "s-" + self.id().rsplit("_", 1)[-1])  # a short session id
        p = self.start_proxy(**control_config(), decision_log=log_path, decision_log_per_client=0,
                             allow_http=["allowed.test:443"], extra_args=["--session-dir", sd])
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, p.control_listeners[0][1], sd)
        self.addCleanup(c.close)
        return p, c

    @staticmethod
    def unwritten(c):
        body = c.request("GET", "/metrics").body
        return int(re.search(r"^vibepit_decision_log_unwritten_total (\d+)$", body, re.M).group(1))

    def deny(self, p, prefix, n):
        for i in range(n):
            conn, resp = self.tunnel("%s%d.test:443" % (prefix, i), proxy=p)
            self.assertStatus(resp, 403)
            conn.close()

    @staticmethod
    def lines(path):
        with open(path, "rb") as f:
            return f.read().split(b"\n")[:-1]

    def test_full_disk_is_counted_and_writing_resumes(self):
        d = self.small_disk(64)
        path = os.path.join(d, "decisions.ndjson")
        p, c = self.control_proxy(path)
        filler = os.path.join(d, "filler")
        with open(filler, "wb", buffering=0) as f:     # fill the disk to the last byte
            for size in (4096, 64, 1):
                try:
                    while True:
                        f.write(b"x" * size)
                except OSError:
                    pass
        self.deny(p, "full", 50)
        conn, resp = self.tunnel("allowed.test:443", proxy=p)   # still serving
        self.assertStatus(resp, 200)
        conn.close()
        # 50 denials, the tunnel's decision and its close record: all refused by the disk.
        lost = poll(lambda: self.unwritten(c), lambda n: n >= 52)
        self.assertEqual(lost, 52, p.diag())
        self.assertIn("No space left on device", p.stderr())
        os.unlink(filler)                 # space returns
        self.deny(p, "after", 20)
        got = poll(lambda: [json.loads(line) for line in self.lines(path)
                            if line.startswith(b"{") and line.endswith(b"}")],
                   lambda got: sum(1 for r in got if r.get("host", "").startswith("after")) == 20)
        hosts = [r.get("host", "") for r in got]
        self.assertEqual(sum(1 for h in hosts if h.startswith("after")), 20, p.diag())
        self.assertEqual(self.unwritten(c), lost, "writes still failing after space returned")
        self.assertIn("writing again", p.stderr())
        bad = [line for line in self.lines(path) if not (line.startswith(b"{") and line.endswith(b"}"))]
        self.assertLessEqual(len(bad), 1, "more than the one line cut by the full disk: %r" % bad)

    def test_sighup_reopens_the_log_after_an_outside_rotation(self):
        d = os.path.join(self.topo.tmp, "rot")
        os.makedirs(d)
        path = os.path.join(d, "decisions.ndjson")
        p, c = self.control_proxy(path)
        self.deny(p, "before", 3)
        self.assertTrue(wait_until(lambda: len(self.lines(path)) >= 3), p.diag())
        os.rename(path, path + ".1")      # what logrotate does
        p.proc.send_signal(signal.SIGHUP)
        self.assertTrue(wait_until(lambda: "reopening the decision log" in p.stderr()), p.diag())
        self.deny(p, "after", 2)
        self.assertTrue(wait_until(lambda: os.path.exists(path) and len(self.lines(path)) >= 2),
                        "no new file after SIGHUP%s" % p.diag())
        # Two I/O threads: their records may reach the file in either order.
        self.assertEqual(sorted(json.loads(line)["host"] for line in self.lines(path)),
                         ["after0.test", "after1.test"])
        self.assertEqual(len(self.lines(path + ".1")), 3)
        self.assertTrue(p.alive())


if __name__ == "__main__":
    base.main()
