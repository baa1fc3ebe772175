"""The DNS server's upstream side: an upstream that is down or fails, answers too large
for UDP, and the cache (hits, expiry, disabled)."""

import ipaddress
import time

from tests.integration.harness import base
from tests.integration.harness.dns_case import ALLOW_DNS, DnsCase
from tests.integration.harness.wait import within


class DnsUpstreamTest(DnsCase):
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "allow_dns": ALLOW_DNS, "dns_tcp_idle_ms": 1000}

    # ---------------------------------------------------------- upstream failure

    def test_upstream_down_servfail_within_timeout(self):
        # nothing listens on 203.0.113.2:5399
        p = self.dns_proxy(allow_dns=["allowed.test"], upstream_dns=["203.0.113.2:5399"],
                           dns_timeout_ms=1000)
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                # SERVFAIL by dns-timeout-ms with slack: dig gives up then, and fails the test
                r, rec = self.query("allowed.test", "A", status="SERVFAIL", proxy=p, tcp=tcp,
                                    timeout=int(within(1.0)), reason="resolve_failed")
                self.assertEqual(r.answers, [], r)
        self.assertTrue(p.alive())

    def test_upstream_servfail_passed_on(self):
        p = self.dns_proxy(allow_dns=["servfail.test"])
        r, _ = self.query("servfail.test", "A", status="SERVFAIL", proxy=p)
        self.assertEqual(r.answers, [], r)

    # ---------------------------------------------------------- truncation

    def test_truncated_over_udp_whole_over_tcp(self):
        p = self.dns_proxy(allow_dns=["big.test"], dns_cache_entries=0)
        r, _ = self.query("big.test", "A", proxy=p, opts=["+noedns"], reason="allowlisted")
        self.assertIn("tc", r.flags, "a 40-record answer does not fit 512 bytes: %r" % r)
        before = self.topo.dns_stats()
        r, _ = self.query("big.test", "A", proxy=p, tcp=True, reason="allowlisted")
        self.assertNotIn("tc", r.flags, r)
        self.assertEqual(sorted(r.addresses()),
                         sorted(ipaddress.ip_address("198.51.100.%d" % i) for i in range(100, 140)), r)
        after = self.topo.dns_stats()
        self.assertGreater(after["tcp"], before["tcp"], "the TCP client's query went upstream over UDP")
        self.assertGreater(after["queries"].get("big.test/A", 0), before["queries"].get("big.test/A", 0))

    # ---------------------------------------------------------- cache

    def test_cache_answers_second_query(self):
        p = self.dns_proxy(allow_dns=["allowed.test"])
        before = self.topo.dns_count("allowed.test/A")
        r1, rec1 = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        time.sleep(1.1)   # TTLs count down in whole seconds
        r2, rec2 = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 1, "second query went upstream")
        self.assertIs(rec1["cached"], False, rec1)
        self.assertIs(rec2["cached"], True, rec2)
        self.assertAnswered(r2, "A", ["198.51.100.10"])
        self.assertLessEqual(r2.answers[0][1], r1.answers[0][1], (r1, r2))
        self.assertLessEqual(r1.answers[0][1], 30, r1)
        # the cache serves TCP clients too
        r3, rec3 = self.query("allowed.test", "A", proxy=p, tcp=True, reason="allowlisted")
        self.assertAnswered(r3, "A", ["198.51.100.10"])
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 1)

    def test_cache_entry_expires(self):
        p = self.dns_proxy(allow_dns=["short.test"], dns_cache_min_ttl=0)
        before = self.topo.dns_count("short.test/A")
        r, rec = self.query("short.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.14"])
        self.assertLessEqual(r.answers[0][1], 1, r)
        time.sleep(2.2)
        r, rec = self.query("short.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.14"])
        self.assertIs(rec["cached"], False, rec)
        self.assertEqual(self.topo.dns_count("short.test/A") - before, 2, "expired entry served")

    def test_cache_disabled(self):
        p = self.dns_proxy(allow_dns=["allowed.test"], dns_cache_entries=0)
        before = self.topo.dns_count("allowed.test/A")
        for _ in range(3):
            _, rec = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
            self.assertIs(rec["cached"], False, rec)
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 3)


if __name__ == "__main__":
    base.main()
