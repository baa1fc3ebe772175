"""CONNECT: tunnels, refusals with reasons, IP literals, decision records."""

import os
import shutil

from tests.integration.harness import base
from tests.integration.harness.proxy import ProxyError
from tests.integration.harness.client import Closed, RawConn
from tests.integration.harness.wait import within

RULES = [
    "allowed.test:443", "allowed.test:80", "dual.test:443",
    "nx.test:443", "servfail.test:443", "dead.test:443", "blackhole.test:443",
    "198.51.100.13:443", "[2001:db8::10]:443", "v6.test:443",
]


class ConnectTest(base.TopologyCase):
    proxy_config = {"allow_http": RULES, "connect_timeout_ms": 800}

    def connect_refused(self, target, status, *needles, error=None, timeout=None):
        c, resp = self.tunnel(target, **({} if timeout is None else {"timeout": timeout}))
        self.assertStatus(resp, status)
        for n in needles:
            self.assertIn(n, resp.text, "%r%s" % (resp, self.diag()))
        if error is not None:
            self.assertProxyStatus(resp, error)
        return resp

    def assertProxyStatus(self, resp, error):
        """RFC 9209: `vibepit; error=TYPE; details="<the body's text on one line>"`."""
        value = resp.header("Proxy-Status")
        self.assertIsNotNone(value, "no Proxy-Status header: %r" % resp)
        self.assertTrue(value.startswith('vibepit; error=%s; details="' % error), value)
        details = resp.text.strip()
        if details.startswith("vibepit: "):
            details = details[len("vibepit: "):]
        details = " ".join(details.split()).replace("\\", "\\\\").replace('"', '\\"')
        self.assertEqual(value, 'vibepit; error=%s; details="%s"' % (error, details))

    # ------------------------------------------------------------ allowed

    def test_tunnel_echo(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertEqual(resp.status_line, "HTTP/1.1 200 Connection established", self.diag())
        payload = bytes(range(256)) * 64
        c.send(payload)
        self.assertEqual(c.recv_exact(len(payload)), payload)

    def test_curl_proxytunnel_http(self):
        r = self.curl("http://allowed.test/via-tunnel", tunnel=True)
        self.assertEqual((r.rc, r.connect_code, r.http_code), (0, 200, 200), "%r%s" % (r, self.diag()))
        echo = r.json()
        self.assertEqual((echo["target"], echo["host"]), ("/via-tunnel", "allowed.test"))
        self.assertEqual(echo["local"], "198.51.100.10:80")

    def test_allowed_ip_literal(self):
        c, resp = self.tunnel("198.51.100.13:443")
        self.assertStatus(resp, 200)
        c.send(b"literal")
        self.assertEqual(c.recv_exact(7), b"literal")

    def test_ipv6_upstream(self):
        if not self.topo.ipv6:
            self.skipTest("IPv6 unavailable in the topology")
        for target in ("dual.test:443", "v6.test:443", "[2001:db8::10]:443"):
            with self.subTest(target=target):
                c, resp = self.tunnel(target)
                self.assertStatus(resp, 200)
                c.send(b"six")
                self.assertEqual(c.recv_exact(3), b"six")

    def test_early_data_after_connect(self):
        """Bytes sent right behind the CONNECT head (no wait for the 200) are not lost."""
        c = self.raw()
        c.send("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\nEARLY")
        self.assertStatus(c.read_response("CONNECT"), 200)
        self.assertEqual(c.recv_exact(5), b"EARLY")

    # ------------------------------------------------------------ refused

    def test_not_allowlisted_names_host_port_and_hint(self):
        self.connect_refused("other.test:443", 403, "other.test", "443", "allowlist",
                             "vibepit allow-http other.test:443", error="http_request_denied")
        self.connect_refused("allowed.test:8443", 403, "vibepit allow-http allowed.test:8443",
                             error="http_request_denied")

    def test_curl_sees_403(self):
        r = self.curl("http://other.test:443/", tunnel=True)
        self.assertEqual(r.connect_code, 403, r)
        self.assertNotEqual(r.rc, 0)

    def test_curl_verbose_shows_why_a_tunnel_was_refused(self):
        """curl never shows a failed CONNECT's body; with -v it prints the Proxy-Status header."""
        r = self.curl("-v", "https://other.test/", tunnel=True)
        self.assertEqual(r.connect_code, 403, r)
        self.assertIn('< Proxy-Status: vibepit; error=http_request_denied; details="access to '
                      'other.test:443 denied: not allowlisted. To allow it, run: vibepit '
                      'allow-http other.test:443"', r.stderr)

    def test_unresolvable(self):
        for name in ("nx.test", "servfail.test"):
            with self.subTest(name=name):
                c, resp = self.tunnel(name + ":443")
                self.assertIn(resp.status, (502, 403), "%r%s" % (resp, self.diag()))
                self.assertIn("could not resolve", resp.text)
                self.assertProxyStatus(resp, "dns_error")

    def test_connection_refused_is_502(self):
        self.connect_refused("dead.test:443", 502, error="connection_refused")

    def test_connect_timeout_is_504(self):
        # A 504 by connect-timeout-ms (800) with slack; without it, no answer fails the test.
        self.connect_refused("blackhole.test:443", 504, error="connection_timeout", timeout=within(0.8))

    def test_malformed(self):
        cases = [  # (request, why)
            ("CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", "no port"),
            ("CONNECT allowed.test:99999 HTTP/1.1\r\nHost: x\r\n\r\n", "port out of range"),
            ("CONNECT allowed.test:0 HTTP/1.1\r\nHost: x\r\n\r\n", "port zero"),
            ("CONNECT allowed.test:4x3 HTTP/1.1\r\nHost: x\r\n\r\n", "port not digits"),
            ("CONNECT :443 HTTP/1.1\r\nHost: x\r\n\r\n", "empty host"),
            ("CONNECT allowed.test:443\r\n\r\n", "no version"),
            ("CONNECT  allowed.test:443 HTTP/1.1\r\n\r\n", "double space"),
            ("CONNECT http://allowed.test:443/ HTTP/1.1\r\n\r\n", "not authority-form"),
            ("CONNECT allowed..test:443 HTTP/1.1\r\n\r\n", "empty label"),
            ("CONNECT allo wed.test:443 HTTP/1.1\r\n\r\n", "space in host"),
            ("CONNECT [::1:443 HTTP/1.1\r\n\r\n", "unclosed bracket"),
            ("HELLO\r\n\r\n", "garbage request line"),
            ("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + "A" * 32 + "\r\n\r\n", "TLS hello"),
        ]
        for req, why in cases:
            with self.subTest(why=why):
                c = self.raw()
                try:
                    resp = c.request(req, "CONNECT")
                except Closed:
                    self.fail("%s: closed without a 400%s" % (why, self.diag()))
                self.assertEqual(resp.status, 400, "%s: %r" % (why, resp))
                self.assertProxyStatus(resp, "http_request_error")
        self.assertTrue(self.proxy.alive())

    def test_impossible_name_gets_no_allow_hint(self):
        # A host no rule could ever name is a bad request that says why, never a 403 that
        # suggests an `allow-http` the grammar would refuse.
        for host in ("-foo.test", "foo-.allowed.test"):
            with self.subTest(host=host):
                resp = self.raw().request("CONNECT %s:443 HTTP/1.1\r\n\r\n" % host, "CONNECT")
                self.assertEqual(resp.status, 400, repr(resp))
                body = resp.body.decode()
                self.assertIn("a label may not start or end with '-'", body)
                self.assertNotIn("allow-http", body)

    # ------------------------------------------------------------ literals

    def test_blocked_ip_literals(self):
        cases = [  # (target, range named in the answer)
            ("10.0.0.1:443", "10.0.0.0/8"),
            ("127.0.0.1:80", "127.0.0.0/8"),
            ("169.254.169.254:80", "169.254.0.0/16"),
            ("[::1]:443", "::1/128"),
            ("[::ffff:10.0.0.1]:443", "10.0.0.0/8"),   # IPv4-mapped: judged by the IPv4 address
            ("172.16.0.1:443", "172.16.0.0/12"),
            ("192.168.1.1:443", "192.168.0.0/16"),
            ("0.0.0.0:443", "0.0.0.0/8"),
            ("100.64.0.1:443", "100.64.0.0/10"),       # shared address space (CGNAT)
            ("[fe80::1]:443", "fe80::/10"),
            ("[fd12::1]:443", "fc00::/7"),
            ("[::]:443", "::/128"),
            ("[::ffff:127.0.0.1]:80", "127.0.0.0/8"),  # mapped loopback
            ("[::127.0.0.1]:80", "127.0.0.0/8"),       # IPv4-compatible
            ("[64:ff9b::10.0.0.1]:443", "10.0.0.0/8"),  # NAT64 well-known prefix
            ("[2002:a00:1::1]:443", "10.0.0.0/8"),     # 6to4 embeds 10.0.0.1
        ]
        for target, cidr in cases:
            with self.subTest(target=target):
                self.connect_refused(target, 403, cidr, error="destination_ip_prohibited")
        self.assertNoCanaryHits()

    def test_ambiguous_ipv4_forms_are_invalid(self):
        before = self.topo.dns_count()
        for target in ("2130706433:80", "0x7f.1:80", "017700000001:80", "127.1:80",
                       "[fe80::1%25eth0]:443"):   # and no zone ids
            with self.subTest(target=target):
                c, resp = self.tunnel(target)
                self.assertStatus(resp, 400)
        self.assertEqual(self.topo.dns_count(), before, "invalid targets must not reach DNS")
        self.assertNoCanaryHits()

    # ------------------------------------------------------------ decision log

    def test_decision_and_close_records(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        c.send(b"x" * 1000)
        self.assertEqual(len(c.recv_exact(1000)), 1000)
        c.close()
        d = self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("host") == "allowed.test"
                                    and str(r.get("port")) == "443" and r.get("verdict") == "allow")
        self.assertTrue(d, self.diag())
        rec = d[-1]
        for field in ("id", "ts", "src", "client", "method", "host", "port", "verdict",
                      "reason", "rule", "addr", "gen"):
            self.assertIn(field, rec, rec)
        self.assertEqual(rec["src"], "proxy")
        self.assertEqual(rec["method"], "CONNECT")
        self.assertEqual(rec["rule"], "allowed.test:443")
        self.assertIn("198.51.100.10", str(rec["addr"]))
        self.assertTrue(str(rec["client"]).startswith("127.0.0.1"), rec)
        closes = self.proxy.wait_records(lambda r: r.get("event") == "close" and r.get("id") == rec["id"])
        self.assertTrue(closes, "no close record for id %s%s" % (rec["id"], self.diag()))
        close = closes[0]
        self.assertGreaterEqual(close["bytes_up"], 1000, close)
        self.assertGreaterEqual(close["bytes_down"], 1000, close)
        self.assertLess(close["bytes_up"], 1000 + 4096, close)
        self.assertGreaterEqual(close["ms"], 0)

    def test_deny_record(self):
        self.tunnel("third.test:443")
        d = self.proxy.wait_records(lambda r: r.get("host") == "third.test" and r.get("verdict") == "deny")
        self.assertTrue(d, self.diag())
        self.assertEqual(d[0].get("event", "decision"), "decision")
        self.assertTrue(d[0].get("reason"), d[0])
        self.assertEqual(str(d[0].get("port")), "443")

    def test_blocked_record_names_range(self):
        self.tunnel("10.0.0.1:443")
        d = self.proxy.wait_records(lambda r: r.get("host") == "10.0.0.1" and r.get("verdict") == "deny")
        self.assertTrue(d, self.diag())
        self.assertIn("10.0.0.0/8", " ".join(str(v) for v in d[0].values()), d[0])


class SystemResolverTest(base.TopologyCase):
    """Without upstream-dns the proxy asks the servers /etc/resolv.conf names. `ip netns exec`
    shows /etc/netns/NS/resolv.conf as /etc/resolv.conf inside NS: here, the fake DNS's."""

    def resolv_conf(self, text):
        etc = "/etc/netns/" + self.topo.px
        if not os.path.isdir("/etc/netns"):
            os.mkdir("/etc/netns")
            self.addCleanup(os.rmdir, "/etc/netns")   # runs last: cleanups are last-in first-out
        os.makedirs(etc)
        self.addCleanup(shutil.rmtree, etc, True)
        with open(os.path.join(etc, "resolv.conf"), "w") as f:
            f.write(text)

    def test_resolv_conf_names_the_upstream(self):
        self.resolv_conf("# test_connect.py\nsearch corp.example\noptions ndots:5\n"
                         "nameserver 203.0.113.2\n")
        p = self.start_proxy(allow_http=["allowed.test:443"], upstream_dns=None)
        self.assertIn("upstream dns 203.0.113.2:53 (from /etc/resolv.conf, as upstream-dns is "
                      "not set)", p.stderr())
        c, resp = self.tunnel("allowed.test:443", proxy=p)
        self.assertStatus(resp, 200)
        c.send(b"ping")
        self.assertEqual(c.recv_exact(4), b"ping")

    def test_no_nameserver_is_a_clear_start_error(self):
        self.resolv_conf("search corp.example\n")
        with self.assertRaises(ProxyError) as cm:
            self.make_proxy(upstream_dns=None)
        self.assertIn('config key "upstream-dns": is not set, and /etc/resolv.conf names no '
                      "usable nameserver", str(cm.exception))
        self.assertIn("exited 2", str(cm.exception))


class ListenTest(base.TopologyCase):

    def test_ipv4_and_ipv6_listeners(self):
        p = self.start_proxy(allow_http=["allowed.test:80"], proxy_listen=["127.0.0.1:0", "[::1]:0"])
        self.assertEqual(sorted(h for h, _ in p.listeners), ["127.0.0.1", "::1"], p.stderr())
        for host, port in p.listeners:
            with self.subTest(listener=host):
                c = RawConn(self.topo, port, host=host)
                self.addCleanup(c.close)
                resp = c.request("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
                self.assertStatus(resp, 200, p)


if __name__ == "__main__":
    base.main()
