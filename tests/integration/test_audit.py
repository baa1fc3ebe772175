"""Audit mode (config key "mode": "audit"): what no rule matched goes ahead and is recorded as
would_deny, through the proxy and the DNS server alike; what no rule can ever allow (the
always-blocked ranges, block-cidr, names that rebind into them) stays blocked and is recorded
as a denial. Switching the mode over the control API's /v1/mode takes effect on the next
request."""

from tests.integration.harness import base
from tests.integration.harness.dns_case import DnsCase


class AuditTest(DnsCase):
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "mode": "audit",
                    "allow_http": ["allowed.test:443"], "allow_dns": ["allowed.test"],
                    "block_cidr": ["198.51.100.12/32"]}

    def decision(self, host):
        recs = self.proxy.wait_records(lambda r: r.get("event") == "decision"
                                       and r.get("host") == host)
        self.assertEqual(len(recs), 1, "one decision record for %s%s" % (host, self.diag()))
        return recs[0]

    def test_unlisted_host_goes_ahead_and_is_marked_would_deny(self):
        c, resp = self.tunnel("other.test:443")
        self.assertStatus(resp, 200)
        c.send(b"audit")
        self.assertEqual(c.recv_exact(5), b"audit")
        rec = self.decision("other.test")
        self.assertEqual((rec["verdict"], rec["reason"], rec["mode"]),
                         ("allow", "not_allowlisted", "audit"), rec)
        self.assertIs(rec.get("would_deny"), True, rec)
        self.assertEqual(rec["addr"], "198.51.100.11", rec)

    def test_allowlisted_host_is_not_marked(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        rec = self.decision("allowed.test")
        self.assertEqual((rec["verdict"], rec["reason"], rec["mode"]),
                         ("allow", "allowlisted", "audit"), rec)
        self.assertNotIn("would_deny", rec)

    def test_private_canary_stays_blocked(self):
        # A literal in an always-blocked range, a name that rebinds into one, and block-cidr.
        for target, host, cidr in (("10.0.0.1:443", "10.0.0.1", "10.0.0.0/8"),
                                   ("rebind-private.test:443", "rebind-private.test", "10.0.0.0/8"),
                                   ("linklocal.test:80", "linklocal.test", "169.254.0.0/16"),
                                   ("wild.test:443", "wild.test", "198.51.100.12/32")):
            with self.subTest(target=target):
                _, resp = self.tunnel(target)
                self.assertStatus(resp, 403)
                self.assertIn(cidr, resp.text)
                rec = self.decision(host)
                self.assertEqual((rec["verdict"], rec["reason"], rec["mode"]),
                                 ("deny", "blocked_address", "audit"), rec)
                self.assertNotIn("would_deny", rec)
        self.assertNoCanaryHits()

    def test_plain_http_to_unlisted_host(self):
        r = self.curl("http://third.test/")
        self.assertEqual(r.http_code, 200, r)
        rec = self.decision("third.test")
        self.assertIs(rec.get("would_deny"), True, rec)

    def test_dns_unlisted_name_answered_and_marked(self):
        r, rec = self.query("other.test", "A", reason="not_allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.11"])
        self.assertEqual((rec["verdict"], rec["mode"]), ("allow", "audit"), rec)
        self.assertIs(rec.get("would_deny"), True, rec)

    def test_dns_rebinding_answer_still_refused(self):
        r, rec = self.query("rebind-private.test", "A", status="REFUSED")
        self.assertBlocked(r, rec, "10.0.0.0/8", "10.0.0.1")
        self.assertEqual(rec["mode"], "audit", rec)

    def test_dns_type_outside_dns_qtypes_still_refused(self):
        r, rec = self.query("other.test", "HINFO", status="REFUSED")
        self.assertEqual(rec["verdict"], "deny", rec)
        self.assertNotIn("would_deny", rec)


class EnforceRecordsTest(DnsCase):
    """The default mode is enforce, and its records say so."""
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "allow_dns": ["allowed.test"]}

    def test_records_name_enforce(self):
        _, resp = self.tunnel("other.test:443")
        self.assertStatus(resp, 403)
        recs = self.proxy.wait_records(lambda r: r.get("host") == "other.test")
        self.assertEqual([(r["verdict"], r["mode"]) for r in recs], [("deny", "enforce")], recs)
        self.assertNotIn("would_deny", recs[0])
        _, rec = self.query("other.test", "A", status="REFUSED", reason="not_allowlisted")
        self.assertEqual((rec["verdict"], rec["mode"]), ("deny", "enforce"), rec)


if __name__ == "__main__":
    base.main()
