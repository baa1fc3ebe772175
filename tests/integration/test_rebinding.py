"""Resolved addresses are classified and only checked addresses are dialled;
rule matching (port globs, wildcards); resolver failure fails closed."""


from tests.integration.harness import base
from tests.integration.harness.wait import within

REBIND = ["rebind-private.test", "rebind-loopback.test", "rebind-v6.test", "mapped.test",
          "linklocal.test", "rebind-mixed.test", "flip.test", "rebind-cgnat.test", "rebind-zero.test",
          "rebind-ula.test", "rebind-nat64.test", "rebind-6to4.test"]


class RebindingTest(base.TopologyCase):
    proxy_config = {"allow_http": ["%s:%s" % (h, p) for h in REBIND for p in ("443", "80")]}

    def test_blocked_answers_name_the_range(self):
        cases = [  # (name, range)
            ("rebind-private.test", "10.0.0.0/8"),
            ("rebind-loopback.test", "127.0.0.0/8"),
            ("rebind-v6.test", "::1/128"),
            ("mapped.test", "10.0.0.0/8"),          # ::ffff:10.0.0.1 judged as 10.0.0.1
            ("linklocal.test", "169.254.0.0/16"),
            ("rebind-cgnat.test", "100.64.0.0/10"),
            ("rebind-zero.test", "0.0.0.0/8"),
            ("rebind-ula.test", "fc00::/7"),
            ("rebind-nat64.test", "10.0.0.0/8"),    # 64:ff9b::a00:1
            ("rebind-6to4.test", "10.0.0.0/8"),     # 2002:a00:1::1
        ]
        for name, cidr in cases:
            for via in ("connect", "get"):
                with self.subTest(name=name, via=via):
                    if via == "connect":
                        _, resp = self.tunnel(name + ":443")
                    else:
                        resp = self.raw().request("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n" % (name, name))
                    self.assertStatus(resp, 403)
                    self.assertIn(cidr, resp.text, "%r%s" % (resp, self.diag()))
                    self.assertTrue((resp.header("Proxy-Status") or "").startswith(
                        "vibepit; error=destination_ip_prohibited; "), resp.headers)
        self.assertNoCanaryHits()

    def test_mixed_answer_dials_only_the_public_address(self):
        for i in range(5):
            c, resp = self.tunnel("rebind-mixed.test:443")
            self.assertStatus(resp, 200)
            c.send(b"mixed%d" % i)
            self.assertEqual(c.recv_exact(6), b"mixed%d" % i)
            c.close()
        r = self.curl("http://rebind-mixed.test/")
        self.assertEqual(r.http_code, 200, r)
        self.assertEqual(r.json()["local"], "198.51.100.10:80")
        recs = self.proxy.wait_records(lambda r: r.get("event") == "decision"
                                       and r.get("host") == "rebind-mixed.test", count=6)
        self.assertEqual(len(recs), 6, self.diag())
        for rec in recs:
            self.assertEqual(rec["verdict"], "allow", rec)
            self.assertIn("198.51.100.10", str(rec["addr"]), rec)
            self.assertNotIn("10.0.0.1", str(rec["addr"]).replace("198.51.100.10", ""), rec)
        self.assertNoCanaryHits()

    def test_flip_never_reaches_private_address(self):
        before = self.topo.dns_count("flip.test/A")
        outcomes = []
        n = 10
        for i in range(n):
            c, resp = self.tunnel("flip.test:443")
            if resp.status == 200:
                c.send(b"flip")
                self.assertEqual(c.recv_exact(4), b"flip")
            else:
                self.assertStatus(resp, 403)
                self.assertIn("10.0.0.0/8", resp.text)
            outcomes.append(resp.status)
            c.close()
        recs = self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("host") == "flip.test",
                                       count=n)
        self.assertEqual(len(recs), n, self.diag())
        for rec in recs:
            if rec["verdict"] == "allow":
                self.assertIn("198.51.100.10", str(rec["addr"]), rec)
                self.assertNotIn("10.0.0.1", str(rec["addr"]).replace("198.51.100.10", ""), rec)
        self.assertNoCanaryHits()
        queries = self.topo.dns_count("flip.test/A") - before
        self.assertLessEqual(queries, n, "at most one A lookup per decision (%s)" % outcomes)
        self.assertGreaterEqual(queries, 1)


class RuleMatchingTest(base.TopologyCase):
    proxy_config = {"allow_http": ["allowed.test:8*", "*.wild.test:*"]}

    def test_port_glob(self):
        for port in (80, 8080, 8443):
            with self.subTest(port=port):
                r = self.curl("http://allowed.test:%d/" % port)
                self.assertEqual(r.http_code, 200, "%r%s" % (r, self.diag()))
                self.assertEqual(r.json()["local"], "198.51.100.10:%d" % port)
        _, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 403)
        self.assertIn("vibepit allow-http allowed.test:443", resp.text)
        r = self.curl("http://allowed.test:9000/")     # 9000 does not match 8*
        self.assertEqual(r.http_code, 403, r)
        _, resp = self.tunnel("allowed.test:9000")
        self.assertStatus(resp, 403)

    def test_wildcard_subdomains_not_apex(self):
        for name in ("www.wild.test", "a.b.wild.test", "WWW.Wild.Test"):
            with self.subTest(name=name):
                c, resp = self.tunnel(name + ":443")
                self.assertStatus(resp, 200)
                c.send(b"w")
                self.assertEqual(c.recv_exact(1), b"w")
        _, resp = self.tunnel("wild.test:443")
        self.assertStatus(resp, 403)
        self.assertIn("vibepit allow-http wild.test:443", resp.text)
        r = self.curl("http://www.wild.test:8080/")
        self.assertEqual(r.http_code, 200, r)

    def test_case_insensitive_host(self):
        r = self.curl("http://ALLOWED.Test/")
        self.assertEqual(r.http_code, 200, "%r%s" % (r, self.diag()))


class BlockCidrTest(base.TopologyCase):
    proxy_config = {"allow_http": ["other.test:443", "allowed.test:443", "198.51.100.13:443"],
                    "block_cidr": ["198.51.100.11/32", "198.51.100.13/32"]}

    def test_block_cidr_overrides_allow(self):
        for target in ("other.test:443", "198.51.100.13:443"):
            with self.subTest(target=target):
                _, resp = self.tunnel(target)
                self.assertStatus(resp, 403)
                self.assertIn("198.51.100.", resp.text)
        before = [c for c in self.topo.upstream_connections() if c["local"].startswith("198.51.100.1")]
        self.assertFalse([c for c in before if c["local"].split(":")[0] in ("198.51.100.11", "198.51.100.13")])
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)


class ResolverDownTest(base.TopologyCase):
    """No answer from upstream DNS: refuse quickly (resolve-timeout-ms 1000)."""

    def check_fails_closed(self, dns, error):
        p = self.start_proxy(allow_http=["allowed.test:443", "allowed.test:80"], upstream_dns=[dns],
                             resolve_timeout_ms=1000)
        # answered by resolve-timeout-ms with slack; no answer by then fails the test
        _, resp = self.tunnel("allowed.test:443", proxy=p, timeout=within(1.0))
        self.assertIn(resp.status, (502, 403), "%r%s" % (resp, p.diag()))
        self.assertIn("could not resolve", resp.text)
        self.assertTrue((resp.header("Proxy-Status") or "").startswith(
            "vibepit; error=%s; " % error), resp.headers)
        r = self.curl("http://allowed.test/", proxy=p)
        self.assertIn(r.http_code, (502, 403), r)
        self.assertTrue(p.alive())

    def test_silent_dns(self):
        self.check_fails_closed("198.51.100.250:53", "dns_timeout")  # blackholed

    def test_refusing_dns(self):
        self.check_fails_closed("198.51.100.19:53", "dns_error")  # ICMP port unreachable

    def test_dns_stops_answering_one_name(self):
        p = self.start_proxy(allow_http=["drop.test:443"], resolve_timeout_ms=1000)
        _, resp = self.tunnel("drop.test:443", proxy=p, timeout=within(1.0))   # resolve-timeout-ms
        self.assertIn(resp.status, (502, 403), "%r%s" % (resp, p.diag()))
        self.assertTrue((resp.header("Proxy-Status") or "").startswith(
            "vibepit; error=dns_timeout; "), resp.headers)


if __name__ == "__main__":
    base.main()
