"""TLS inspection: a CONNECT to a host:port that a method/path rule names is answered by the
proxy as that host (a leaf from the inspection CA written to inspect-ca-cert-out), and each
request inside is decided on its own: allowed and refused requests on one keep-alive
connection, dot-segment and encoded traversal refused, an upstream whose certificate does
not verify answered 502, a host no such rule names tunnelled with its own certificate, and
the SNI check before all of it. Fake HTTPS upstreams with certificates from a test CA
(trusted through upstream-ca-file) and from a rogue one (trusted by nobody)."""

import http.client
import json
import os
import ssl

from tests.integration.harness import base, netns
from tests.integration.harness.control import TestCa
from tests.integration.harness.wait import LIVENESS_S, wait_until

TLS_PORT = 4443
ALLOWED = "198.51.100.10"   # allowed.test, a.pkg.test
OTHER = "198.51.100.11"     # other.test: a certificate nobody trusts


def start_https(topo, addr, ca, name, san):
    cert, key = ca.issue(name, "serverAuth", san=san)
    log = os.path.join(topo.tmp, "%s.ndjson" % name)
    ready = os.path.join(topo.tmp, "%s.ready" % name)
    argv = netns.Topology._upstream_argv([addr], log, ready)
    topo.popen(topo.net, argv + ["--https", str(TLS_PORT), "--cert", cert, "--key", key], log=name)
    if not wait_until(lambda: os.path.exists(ready), timeout=LIVENESS_S):
        raise RuntimeError("fake HTTPS upstream not ready: %s" % topo.read_log(name))
    return log


class InspectCase(base.TopologyCase):
    proxy_config = None   # set in setUpClass: it names files made there

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            tmp = cls.topo.tmp
            cls.ca = TestCa(os.path.join(tmp, "tls-ca"))
            rogue = TestCa(os.path.join(tmp, "rogue-ca"), name="rogue-ca")
            cls.allowed_log = start_https(cls.topo, ALLOWED, cls.ca, "allowed",
                                          "DNS:allowed.test,DNS:a.pkg.test")
            cls.other_log = start_https(cls.topo, OTHER, rogue, "other", "DNS:other.test")
            cls.inspect_ca = os.path.join(tmp, "inspect-ca.pem")
            cls.proxy = cls.make_proxy(
                allow_http=["allowed.test:4443 GET,HEAD /ok/**", "allowed.test:4443 POST /ok/upload",
                            "other.test:4443 GET /**", "a.pkg.test:4443"],
                upstream_ca_file=cls.ca.cert, inspect_ca_cert_out=cls.inspect_ca)
        except BaseException:
            cls.tearDownClass()
            raise

    def targets(self, log):
        """The request targets a fake upstream served, in order."""
        return [r.get("target") for r in netns.Topology._read_ndjson(log) if r.get("kind") == "https-request"]

    def handshakes(self, log):
        return [r.get("sni") for r in netns.Topology._read_ndjson(log) if r.get("kind") == "https-handshake"]

    def inspected(self, host="allowed.test", cafile=None):
        """An HTTPS connection to host:4443 through the proxy, trusting the inspection CA."""
        c, resp = self.tunnel("%s:%d" % (host, TLS_PORT))
        self.assertStatus(resp, 200)
        ctx = ssl.create_default_context(cafile=cafile or self.inspect_ca)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        tls = ctx.wrap_socket(c.sock, server_hostname=host)
        conn = http.client.HTTPConnection(host, TLS_PORT, timeout=LIVENESS_S)
        conn.sock = tls
        self.addCleanup(conn.close)
        return conn, tls

    def get(self, conn, path, method="GET", body=None, headers=None):
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.getheader("Proxy-Status") or "", r.read()

    def request_records(self, pred):
        return self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("port") == TLS_PORT
                                       and r.get("method") != "CONNECT" and pred(r))


class KeepAliveTest(InspectCase):
    def test_allowed_and_refused_requests_share_one_connection(self):
        conn, tls = self.inspected()
        self.assertEqual(tls.selected_alpn_protocol(), "http/1.1")
        status, _, body = self.get(conn, "/ok/one?q=1")
        self.assertEqual(status, 200, body)
        first = json.loads(body)
        self.assertEqual((first["target"], first["host"]), ("/ok/one?q=1", "allowed.test:4443"))

        status, proxy_status, body = self.get(conn, "/admin/delete", method="GET")
        self.assertEqual(status, 403, body)
        self.assertIn("http_request_denied", proxy_status)
        self.assertIn(b"vibepit allow-http 'allowed.test:4443 GET /admin/delete'", body)

        status, _, body = self.get(conn, "/ok/upload", method="POST", body=b"x" * 5000)
        self.assertEqual(status, 200, body)
        second = json.loads(body)
        self.assertEqual(second["body_length"], 5000)
        # The same upstream connection carried both allowed requests.
        self.assertEqual((first["request_on_conn"], second["request_on_conn"]), (1, 2))

        status, _, body = self.get(conn, "/ok/upload", method="PUT", body=b"y")
        self.assertEqual(status, 403, body)
        # A refused request with a body closes the connection: the body is not read as a request.
        self.assertNotIn("/admin/delete", self.targets(self.allowed_log))

        recs = self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("port") == TLS_PORT
                                       and r.get("method") in ("GET", "POST", "PUT"), count=4)
        seen = [(r["method"], r.get("path"), r["verdict"], r.get("rule", "")) for r in recs[-4:]]
        # Each names the CONNECT it came in.
        tunnels = {r.get("tunnel") for r in recs[-4:]}
        self.assertEqual(len(tunnels), 1, recs)
        connect = [r for r in self.proxy.records() if r.get("id") in tunnels and r.get("method") == "CONNECT"]
        self.assertTrue(connect and connect[0]["verdict"] == "allow", connect)
        self.assertEqual(seen, [
            ("GET", "/ok/one", "allow", "allowed.test:4443 GET,HEAD /ok/**"),
            ("GET", "/admin/delete", "deny", ""),
            ("POST", "/ok/upload", "allow", "allowed.test:4443 POST /ok/upload"),
            ("PUT", "/ok/upload", "deny", ""),
        ], recs)

    def test_the_leaf_names_the_host_and_chains_to_the_inspection_ca(self):
        _, tls = self.inspected()
        cert = tls.getpeercert()
        self.assertEqual(cert["subjectAltName"], (("DNS", "allowed.test"),))
        issuer = dict(x[0] for x in cert["issuer"])
        self.assertIn("vibepit inspection CA", issuer["commonName"])
        # The upstream's own certificate is not what the client sees: no handshake reached it
        # with the test CA's name on it, and the client trusts only the inspection CA.
        with self.assertRaises(ssl.SSLCertVerificationError):
            self.inspected(cafile=self.ca.cert)

    def test_curl_keeps_the_connection_for_two_urls(self):
        r = self.curl("--cacert", self.inspect_ca, "https://allowed.test:4443/ok/a",
                      "https://allowed.test:4443/ok/b", tunnel=True)
        self.assertEqual(r.rc, 0, r.stderr)
        # One inspected connection, one upstream connection: its second request.
        self.assertIn(b'"target": "/ok/b"', r.stdout)
        self.assertIn(b'"request_on_conn": 2', r.stdout)


class TraversalTest(InspectCase):
    def test_dot_segments_and_encoded_separators_never_reach_upstream(self):
        conn, _ = self.inspected()
        status, _, body = self.get(conn, "/ok/../admin/delete")
        self.assertEqual(status, 403, body)                         # decided as /admin/delete
        for path in ("/ok/%2e%2e/admin", "/ok/a%2Fb", "/ok/a%5cb", "/ok/a%00b"):
            conn, _ = self.inspected()
            status, _, body = self.get(conn, path)
            self.assertEqual(status, 400, (path, body))
            self.assertIn(b"cannot match its path", body)
        conn, _ = self.inspected()
        status, _, body = self.get(conn, "/ok/%7euser/./x")         # unreserved decoded, "." gone
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["target"], "/ok/~user/x")
        served = self.targets(self.allowed_log)
        self.assertFalse([t for t in served if "admin" in t or "%" in t], served)

    def test_a_request_for_another_host_is_refused(self):
        conn, _ = self.inspected()
        status, _, body = self.get(conn, "/ok/x", headers={"Host": "other.test:4443"})
        self.assertEqual(status, 400, body)
        self.assertIn(b"does not match", body)


class UpstreamTest(InspectCase):
    def test_an_untrusted_upstream_certificate_gives_502(self):
        conn, _ = self.inspected("other.test")
        status, proxy_status, body = self.get(conn, "/anything")
        self.assertEqual(status, 502, body)
        self.assertIn("tls_certificate_error", proxy_status)
        self.assertIn(b"unable to get local issuer certificate", body)
        self.assertEqual(self.targets(self.other_log), [])
        rec = self.request_records(lambda r: r.get("host") == "other.test")[-1]
        self.assertEqual((rec["status"], rec["verdict"]), (502, "allow"))
        self.assertIn("refused", rec["detail"])

    def test_a_host_no_path_rule_names_keeps_its_own_certificate(self):
        r = self.curl("--cacert", self.ca.cert, "https://a.pkg.test:4443/anything", tunnel=True)
        self.assertEqual((r.rc, r.http_code), (0, 200), r.stderr)
        r = self.curl("--cacert", self.inspect_ca, "https://a.pkg.test:4443/anything", tunnel=True)
        self.assertNotEqual(r.rc, 0, "an uninspected host presented an inspection leaf")
        self.assertEqual(self.handshakes(self.allowed_log)[-1], "a.pkg.test")

    def test_fronting_an_inspected_host_is_refused(self):
        argv = ["openssl", "s_client", "-proxy", "127.0.0.1:%d" % self.proxy.port,
                "-connect", "allowed.test:%d" % TLS_PORT, "-servername", "other.test",
                "-CAfile", self.inspect_ca, "-quiet"]
        r = self.topo.run(self.topo.px, argv, timeout=15, input=b"GET /ok/x HTTP/1.1\r\n\r\n")
        self.assertIn("access denied", r.stderr.decode("utf-8", "replace"))
        recs = self.proxy.wait_records(lambda r: r.get("reason") == "sni_mismatch")
        self.assertTrue(recs, self.diag())


if __name__ == "__main__":
    base.main()
