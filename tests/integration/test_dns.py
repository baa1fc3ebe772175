"""The DNS server inside vibepit-proxy, with the real dig as client: the allowlist, answers
checked for blocked addresses (A, AAAA, CNAME chains, HTTPS hints), query types, the
listeners, and one decision record per answered query. The upstream side (failure,
truncation, cache) is in test_dns_upstream.py; abuse (rate limit, malformed input, TCP
idle and pipelining) in test_dns_abuse.py."""

import ipaddress

from tests.integration.harness import base
from tests.integration.harness.dns_case import ALLOW_DNS, RCODE_NAMES, DnsCase, reply_head, same_addr
from tests.integration.harness.fake_dns import AXFR, FORMERR, IXFR, NOTIMP, REFUSED, build_query


class DnsTest(DnsCase):
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "allow_dns": ALLOW_DNS, "dns_tcp_idle_ms": 1000}

    # ---------------------------------------------------------- allowlist

    def test_allowed_names_answer_over_udp_and_tcp(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("allowed.test", "A", tcp=tcp, reason="allowlisted")
                self.assertAnswered(r, "A", ["198.51.100.10"])
                self.assertIn("qr", r.flags, r)
                self.assertTrue(any(same_addr(a, "198.51.100.10") for a in rec["addrs"]), rec)
                r, rec = self.query("v6.test", "AAAA", tcp=tcp, reason="allowlisted")
                self.assertEqual(r.addresses(), [ipaddress.ip_address("2001:db8::10")], r)
                self.assertTrue(any(same_addr(a, "2001:db8::10") for a in rec["addrs"]), rec)
                r, _ = self.query("dual.test", "A", tcp=tcp)
                self.assertAnswered(r, "A", ["198.51.100.10"])
                r, _ = self.query("dual.test", "AAAA", tcp=tcp)
                self.assertEqual(r.addresses(), [ipaddress.ip_address("2001:db8::10")], r)
        self.assertGreaterEqual(self.topo.dns_count("allowed.test/A"), 1)

    def test_allowed_name_without_records_is_nodata(self):
        r, rec = self.query("allowed.test", "AAAA", reason="allowlisted")
        self.assertEqual(r.answers, [], r)

    def test_denied_name_refused_and_not_forwarded(self):
        for tcp in (False, True):
            for name in ("other.test", "never-allowed.test"):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, "A", status="REFUSED", tcp=tcp, reason="not_allowlisted")
                    self.assertEqual(r.answers, [], r)
                    self.assertEqual(rec["verdict"], "deny", rec)
                    self.assertEqual(rec["addrs"], [], rec)
        self.assertEqual(self.topo.dns_count("other.test/A"), 0, self.topo.dns_stats())
        self.assertEqual(self.topo.dns_count("never-allowed.test/A"), 0, self.topo.dns_stats())

    def test_deny_rcode_nxdomain(self):
        p = self.dns_proxy(allow_dns=["allowed.test", "rebind-private.test"], dns_deny_rcode="NXDOMAIN")
        r, rec = self.query("third.test", "A", status="NXDOMAIN", proxy=p, reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        r, rec = self.query("rebind-private.test", "A", status="NXDOMAIN", proxy=p)
        self.assertBlocked(r, rec, "10.0.0.0/8", "10.0.0.1", status="NXDOMAIN")
        r, _ = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.10"])
        self.assertEqual(self.topo.dns_count("third.test/A"), 0, self.topo.dns_stats())

    def test_wildcard_any_depth_but_not_apex(self):
        for name in ("www.wild.test", "a.b.wild.test"):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, _ = self.query(name, "A", tcp=tcp, reason="allowlisted")
                    self.assertAnswered(r, "A", ["198.51.100.12"])
        r, rec = self.query("wild.test", "A", status="REFUSED", reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("wild.test/A"), 0, self.topo.dns_stats())

    def test_exact_name_does_not_allow_subdomains(self):
        r, _ = self.query("x.allowed.test", "A", status="REFUSED", reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("x.allowed.test/A"), 0, self.topo.dns_stats())

    def test_mixed_case_and_trailing_dot_match(self):
        for name, addr in (("AlLoWeD.TeSt.", "198.51.100.10"), ("ALLOWED.TEST", "198.51.100.10"),
                           ("WwW.WiLd.TeSt.", "198.51.100.12")):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, _ = self.query(name, "A", tcp=tcp, reason="allowlisted")
                    self.assertAnswered(r, "A", [addr])

    # ---------------------------------------------------------- answers with blocked addresses

    def test_rebinding_answers_refused(self):
        cases = [  # (name, type, range, address in the answer)
            ("rebind-private.test", "A", "10.0.0.0/8", "10.0.0.1"),
            ("rebind-loopback.test", "A", "127.0.0.0/8", "127.0.0.1"),
            ("rebind-v6.test", "AAAA", "::1/128", "::1"),
            ("mapped.test", "AAAA", "10.0.0.0/8", "::ffff:10.0.0.1"),   # judged as 10.0.0.1
            # A public answer with 10.0.0.1 in the AUTHORITY section: the client gets the whole
            # message, so every section is judged.
            ("rebind-authority.test", "A", "10.0.0.0/8", "10.0.0.1"),
        ]
        for name, qtype, cidr, addr in cases:
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, qtype, status="REFUSED", tcp=tcp)
                    self.assertBlocked(r, rec, cidr, addr)

    def test_https_hints_checked(self):
        r, rec = self.query("https-ok.test", "HTTPS", reason="allowlisted")
        [data] = r.data("HTTPS")
        self.assertIn("ipv4hint=198.51.100.10", data, r)
        self.assertIn("ipv6hint=2001:db8::10", data, r)
        self.assertIn('alpn="h2"', data, r)
        for name, cidr, addr in (("https-private.test", "10.0.0.0/8", "10.0.0.1"),
                                 ("https-v6private.test", "::1/128", "::1")):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, "HTTPS", status="REFUSED", tcp=tcp)
                    self.assertBlocked(r, rec, cidr, addr)

    # ---------------------------------------------------------- query types

    def test_txt_and_mx_allowed_by_default(self):
        r, _ = self.query("txt.test", "TXT", reason="allowlisted")
        self.assertEqual(r.data("TXT"), ['"hello"'], r)
        r, _ = self.query("mx.test", "MX", tcp=True, reason="allowlisted")
        self.assertEqual(r.data("MX"), ["10 allowed.test."], r)

    def test_qtypes_restricted(self):
        p = self.dns_proxy(allow_dns=["txt.test", "allowed.test"], dns_qtypes=["A"])
        before = self.topo.dns_stats()["queries"]
        for name, qtype in (("txt.test", "TXT"), ("allowed.test", "AAAA"), ("allowed.test", "MX")):
            with self.subTest(name=name, qtype=qtype):
                r, rec = self.query(name, qtype, status="REFUSED", proxy=p)
                self.assertEqual(r.answers, [], r)
                self.assertEqual(rec["verdict"], "deny", rec)
        after = self.topo.dns_stats()["queries"]
        for key in ("txt.test/TXT", "allowed.test/AAAA", "allowed.test/MX"):
            self.assertEqual(after.get(key, 0), before.get(key, 0), "%s was forwarded" % key)
        r, _ = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.10"])

    def test_any_gets_rfc8482_answer_and_is_not_forwarded(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("allowed.test", "ANY", status={"NOERROR", "REFUSED"}, tcp=tcp)
                if r.status == "NOERROR":
                    self.assertEqual([t for _, _, t, _ in r.answers], ["HINFO"], r)
                    self.assertIn("RFC8482", r.data("HINFO")[0], r)
                else:
                    self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("allowed.test/ANY"), 0, self.topo.dns_stats())

    def test_zone_transfer_not_served(self):
        for qtype in (AXFR, IXFR):
            for tcp in (False, True):
                with self.subTest(qtype=qtype, tcp=tcp):
                    q = build_query("allowed.test", qtype, qid=0x4242 + qtype)
                    msg = self.tcp_exchange(q) if tcp else self.udp_exchange(q)
                    self.assertIsNotNone(msg, "no answer to a zone transfer request%s" % self.diag())
                    qid, qr, _, _, rcode = reply_head(msg)
                    self.assertEqual((qid, qr), (0x4242 + qtype, True))
                    # an IXFR without the client's SOA is malformed as well
                    accept = (NOTIMP, REFUSED) if qtype == AXFR else (NOTIMP, REFUSED, FORMERR)
                    self.assertIn(rcode, accept, RCODE_NAMES.get(rcode, rcode))
        stats = self.topo.dns_stats()["queries"]
        self.assertEqual(stats.get("allowed.test/AXFR", 0) + stats.get("allowed.test/IXFR", 0), 0, stats)
        self.assertServing()

    # ---------------------------------------------------------- listeners and records

    def test_listeners_v4_and_v6(self):
        p = self.dns_proxy(dns_listen=["127.0.0.1:0", "[::1]:0"], allow_dns=["allowed.test"])
        self.assertEqual(len(p.dns_listeners), 2, p.stderr())
        self.assertEqual({h for h, _ in p.dns_listeners}, {"127.0.0.1", "::1"})
        for listener in p.dns_listeners:
            for tcp in (False, True):
                with self.subTest(listener=listener, tcp=tcp):
                    r, rec = self.query("allowed.test", "A", proxy=p, tcp=tcp, listener=listener,
                                        reason="allowlisted")
                    self.assertAnswered(r, "A", ["198.51.100.10"])
                    self.assertTrue(rec["client"].startswith("[::1]:" if ":" in listener[0] else "127.0.0.1:"),
                                    rec)

    def test_decision_records(self):
        p = self.dns_proxy(allow_dns=["allowed.test"])
        _, allow = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        _, deny = self.query("other.test", "A", status="REFUSED", proxy=p, tcp=True, reason="not_allowlisted")
        self.assertEqual(allow["qname"].lower(), "allowed.test")
        self.assertEqual(allow["addrs"], ["198.51.100.10"], allow)
        self.assertEqual(allow["rule"], "allowed.test", allow)
        self.assertEqual((deny["verdict"], deny["addrs"]), ("deny", []), deny)
        self.assertRegex(allow["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
        recs = p.dns_records()
        self.assertEqual(len(recs), 2, recs)      # one record per query, nothing else
        ids = [r["id"] for r in recs]
        self.assertEqual(len(set(ids)), len(ids), ids)
        self.assertEqual(len({r["gen"] for r in recs}), 1, recs)


class CnameTest(DnsCase):
    """Chains are judged by every address in the answer; targets need no allowlist entry."""
    proxy_config = {"dns_listen": ["127.0.0.1:0"],
                    "allow_dns": ["cname-private.test", "cname-public.test", "cname-out.test"]}

    def test_cname_to_private_address_refused(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("cname-private.test", "A", status="REFUSED", tcp=tcp)
                self.assertBlocked(r, rec, "10.0.0.0/8", "10.0.0.1")

    def test_cname_to_public_address_answered(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("cname-public.test", "A", tcp=tcp, reason="allowlisted")
                self.assertEqual(r.data("CNAME"), ["allowed.test."], r)
                self.assertEqual(r.data("A"), ["198.51.100.10"], r)
                self.assertTrue(any(same_addr(a, "198.51.100.10") for a in rec["addrs"]), rec)

    def test_cname_leaving_allowlist_answered(self):
        r, rec = self.query("cname-out.test", "A", reason="allowlisted")
        self.assertEqual(r.data("CNAME"), ["target.elsewhere.test."], r)
        self.assertEqual(r.data("A"), ["198.51.100.11"], r)
        # the upstream resolved the chain; the target was neither asked for nor needed a rule
        self.assertEqual(self.topo.dns_count("target.elsewhere.test/A"), 0, self.topo.dns_stats())
        r, _ = self.query("target.elsewhere.test", "A", status="REFUSED", reason="not_allowlisted")


if __name__ == "__main__":
    base.main()
