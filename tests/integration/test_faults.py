"""Faults on the far side: an upstream that resets in the middle of a tunnel or of a
chunked response, and an upstream DNS server that goes away and comes back. Each time the
proxy ends what it must end, writes the records with the bytes moved so far, keeps no
query or connection stuck, and serves the next client."""

import os
import socket
import sys
import time

from tests.integration.harness import base, netns
from tests.integration.harness.dns_case import DnsCase
from tests.integration.harness.fake_dns import build_query, parse_response
from tests.integration.harness.wait import LIVENESS_S, poll, wait_until, within

RULES = ["allowed.test:443", "allowed.test:80"]
RESET_MARKER = b"VP-RESET-NOW"     # harness/fake_upstream.py: the echo server resets on it


def get(url, host):
    return "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (url, host)


class UpstreamResetTest(base.TopologyCase):
    proxy_config = {"allow_http": RULES}

    def close_record(self, decision_id):
        recs = self.proxy.wait_records(lambda r: r.get("event") == "close" and r.get("id") == decision_id)
        self.assertEqual(len(recs), 1, "want one close record for %s%s" % (decision_id, self.diag()))
        return recs[0]

    def test_reset_in_the_middle_of_a_tunnel(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        decision = self.proxy.wait_records(lambda r: r.get("event") == "decision" and
                                           r.get("client") == "127.0.0.1:%d" % c.sock.getsockname()[1])
        self.assertEqual(len(decision), 1, self.diag())
        payload = bytes(range(256)) * 40   # 10 240 bytes, echoed whole before the reset
        c.send(payload)
        self.assertEqual(c.recv_exact(len(payload)), payload)
        c.send(RESET_MARKER)
        self.assertTrue(c.closed_by_peer(LIVENESS_S), "the client's side stayed open after the upstream reset")
        rec = self.close_record(decision[0]["id"])
        self.assertEqual(rec["bytes_down"], len(payload), rec)
        self.assertEqual(rec["bytes_up"], len(payload) + len(RESET_MARKER), rec)
        # the next client is served
        c2, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        c2.send(b"ping")
        self.assertEqual(c2.recv_exact(4), b"ping")
        c2.close()

    def test_reset_in_the_middle_of_a_chunked_response(self):
        c = self.raw()
        port = c.sock.getsockname()[1]
        c.send(get("http://allowed.test/raw/reset-chunked", "allowed.test").encode())
        got = c.read_to_eof(timeout=LIVENESS_S)
        head, _, body = got.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200"), got[:200])
        self.assertIn(b"transfer-encoding: chunked", head.lower())
        # the first chunk whole, the second cut where the upstream stopped, and no last
        # chunk made up by the proxy: the client can tell the body is incomplete
        self.assertTrue(body.startswith(b"400\r\n" + b"a" * 1024 + b"\r\n400\r\n"), body[:64])
        self.assertFalse(body.endswith(b"0\r\n\r\n"), body[-32:])
        recs = self.proxy.wait_records(lambda r: r.get("client") == "127.0.0.1:%d" % port)
        self.assertEqual(len(recs), 1, "one record for the request%s" % self.diag())
        rec = recs[0]
        self.assertEqual((rec["verdict"], rec["status"]), ("allow", 200), rec)
        self.assertEqual(rec["bytes_down"], len(got), rec)
        # the next request on a new connection is served
        c2 = self.raw()
        self.assertStatus(c2.request(get("http://allowed.test/", "allowed.test")), 200)
        c2.close()


class UpstreamDnsOutageTest(DnsCase):
    """upstream-dns points at a server this test starts and stops: 203.0.113.2:5300."""
    proxy_config = None
    PORT = 5300

    def start_dns(self):
        stats = os.path.join(self.topo.tmp, "dns-5300-%d.json" % time.monotonic_ns())
        p = self.topo.popen(self.topo.net, [sys.executable, os.path.join(netns.HERE, "fake_dns.py"),
                                            "--listen", netns.DNS_ADDR, "--port", str(self.PORT),
                                            "--stats", stats], log="fake_dns_5300")

        def ready():
            self.assertIsNone(p.poll(), self.topo.read_log("fake_dns_5300"))
            return os.path.exists(stats)
        self.assertTrue(wait_until(ready, interval=0.02), "fake DNS on port %d not ready" % self.PORT)
        return p

    def udp_query(self, p, name, qid, timeout=LIVENESS_S):
        s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        try:
            s.sendto(build_query(name, 1, qid=qid), (p.dns_host, p.dns_port))
            return parse_response(s.recv(65535))
        finally:
            s.close()

    def rcode_of(self, p, name, qid, timeout=LIVENESS_S):
        return self.udp_query(p, name, qid, timeout)["rcode"]

    def test_upstream_down_then_back(self):
        # dns-max-pending 4: one query left stuck upstream would show as "overloaded" later
        p = self.dns_proxy(allow_dns=["allowed.test"], allow_http=["*.wild.test:443"],
                           upstream_dns=["%s:%d" % (netns.DNS_ADDR, self.PORT)],
                           dns_timeout_ms=500, resolve_timeout_ms=1000, dns_cache_entries=0,
                           dns_max_pending=4)
        for cycle in range(2):
            # a name of its own each cycle: the proxy's resolver may serve an answer it has
            # within its TTL, outage or not
            target = "c%d.wild.test:443" % cycle
            with self.subTest(cycle=cycle, state="down"):
                # more queries than dns-max-pending, one after another: each fails on its own,
                # by dns-timeout-ms with slack (a query left waiting raises socket.timeout)
                for i in range(8):
                    self.assertEqual(self.rcode_of(p, "allowed.test", 0x100 * cycle + i,
                                                   timeout=within(0.5)), 2)  # SERVFAIL
                c, resp = self.tunnel(target, proxy=p)
                self.assertIn(resp.status, (502, 504), resp)
                c.close()
                recs = p.dns_records(lambda r: r.get("qname", "").rstrip(".") == "allowed.test")
                self.assertTrue(recs and all(r["reason"] == "resolve_failed" for r in recs[-8:]),
                                recs[-8:])
            server = self.start_dns()
            with self.subTest(cycle=cycle, state="back"):
                # answered again by the first query: nothing of the outage is left pending or
                # cached (a leftover would give SERVFAIL, or no answer by the deadline)
                r = self.udp_query(p, "allowed.test", 0x1000 + cycle, timeout=within(0.5))
                self.assertEqual(r["rcode"], 0, r)
                self.assertTrue(r["answers"], r)

                # the proxy's own resolver recovers too: an outage failure is not cached
                def connect():
                    c, resp = self.tunnel(target, proxy=p)
                    if resp.status != 200:
                        c.close()
                    return c, resp
                c, resp = poll(connect, lambda got: got[1].status == 200, interval=0.2)
                self.assertStatus(resp, 200, p)
                c.send(b"ping")
                self.assertEqual(c.recv_exact(4), b"ping")
                c.close()
                # and keeps answering: no slot of dns-max-pending was lost to the outage
                for i in range(8):
                    self.assertEqual(self.rcode_of(p, "allowed.test", 0x2000 + i), 0)
            self.topo.stop_process(server)
        self.assertTrue(p.alive())


if __name__ == "__main__":
    base.main()
