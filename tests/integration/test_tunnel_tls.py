"""The SNI check on CONNECT tunnels (config key tunnel-tls), with real TLS clients (curl,
openssl s_client, Python's ssl) against a fake HTTPS upstream whose certificate a test CA
signed: a ClientHello that names another host than the CONNECT (domain fronting) is refused
before a byte reaches the upstream, also when it comes one byte per TCP segment; a matching
one is relayed untouched; "require" refuses what is not TLS or names no host; "off" checks
nothing."""

import os
import socket
import ssl
import time

from tests.integration.harness import base, netns
from tests.integration.harness.control import TestCa
from tests.integration.harness.wait import LIVENESS_S, wait_until

TLS_PORT = 4443
UPSTREAM = "198.51.100.10"   # allowed.test


class TunnelTlsCase(base.TopologyCase):
    proxy_config = {"allow_http": ["allowed.test:4443", "allowed.test:443"]}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.ca = TestCa(os.path.join(cls.topo.tmp, "tls-ca"))
            cert, key = cls.ca.issue("upstream", "serverAuth",
                                     san="DNS:allowed.test,DNS:forbidden.test")
            cls.https_log = os.path.join(cls.topo.tmp, "https.ndjson")
            ready = os.path.join(cls.topo.tmp, "https.ready")
            argv = netns.Topology._upstream_argv([UPSTREAM], cls.https_log, ready)
            cls.topo.popen(cls.topo.net, argv + ["--https", str(TLS_PORT), "--cert", cert, "--key", key],
                           log="fake_https")
            if not wait_until(lambda: os.path.exists(ready), timeout=LIVENESS_S):
                raise RuntimeError("fake HTTPS upstream not ready: %s" % cls.topo.read_log("fake_https"))
        except BaseException:
            cls.tearDownClass()
            raise

    def handshakes(self):
        """The server names the fake upstream's TLS handshakes were made for, in order."""
        return [r.get("sni") for r in netns.Topology._read_ndjson(self.https_log)
                if r.get("kind") == "https-handshake"]

    def upstream_accepts(self):
        return [r for r in netns.Topology._read_ndjson(self.https_log) if r.get("kind") == "https"]

    def deny_record(self, proxy, reason):
        recs = proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("verdict") == "deny"
                                  and r.get("reason") == reason)
        self.assertTrue(recs, "no %s deny record%s" % (reason, self.diag(proxy)))
        return recs[-1]

    def s_client(self, servername, proxy=None, extra=()):
        argv = ["openssl", "s_client", "-proxy", "127.0.0.1:%d" % (proxy or self.proxy).port,
                "-connect", "allowed.test:%d" % TLS_PORT, "-CAfile", self.ca.cert,
                "-verify_return_error", "-quiet"]
        if servername is None:
            argv.append("-noservername")
        else:
            argv += ["-servername", servername]
        r = self.topo.run(self.topo.px, argv + list(extra), timeout=15,
                          input=b"GET /ok HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def curl_https(self, proxy=None):
        return self.curl("--cacert", self.ca.cert, "https://allowed.test:%d/curl" % TLS_PORT,
                         proxy=proxy, tunnel=True)

    def tls_by_hand(self, server_hostname, piece, proxy=None):
        """CONNECT, then a TLS handshake driven through memory BIOs whose ClientHello goes out
        `piece` bytes per TCP segment. Returns the HTTP response's first line, or the error."""
        c, resp = self.tunnel("allowed.test:%d" % TLS_PORT, proxy=proxy)
        self.assertStatus(resp, 200, proxy)
        sock = c.sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctx = ssl.create_default_context(cafile=self.ca.cert)
        if server_hostname is None:
            ctx.check_hostname = False
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
        first = True
        try:
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    pass
                out = outgoing.read()
                if first:
                    for i in range(0, len(out), piece):
                        sock.sendall(out[i:i + piece])
                        time.sleep(0.002)    # one segment each
                    first = False
                elif out:
                    sock.sendall(out)
                data = sock.recv(65536)
                if not data:
                    return "closed during the handshake"
                incoming.write(data)
            tls.write(b"GET /by-hand HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
            sock.sendall(outgoing.read())
            got = b""
            while b"\r\n" not in got:
                try:
                    got += tls.read(4096)
                except ssl.SSLWantReadError:
                    data = sock.recv(65536)
                    if not data:
                        break
                    incoming.write(data)
            return got.split(b"\r\n")[0].decode()
        except ssl.SSLError as e:
            return "TLS error: %s" % e


class CheckModeTest(TunnelTlsCase):
    def test_curl_through_a_matching_tunnel(self):
        r = self.curl_https()
        self.assertEqual((r.rc, r.http_code), (0, 200), r.stderr)
        self.assertEqual(self.handshakes()[-1], "allowed.test")

    def test_openssl_fronting_is_refused_before_the_upstream_sees_a_byte(self):
        before = len(self.upstream_accepts())
        rc, out, err = self.s_client("forbidden.test")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("access denied", err)   # our alert, read by the client
        rec = self.deny_record(self.proxy, "sni_mismatch")
        self.assertEqual((rec["host"], rec["port"], rec["method"]), ("allowed.test", TLS_PORT, "CONNECT"))
        self.assertIn('"forbidden.test"', rec["detail"])
        self.assertIn('"allowed.test"', rec["detail"])
        close = self.proxy.wait_records(lambda r: r.get("event") == "close" and r.get("id") == rec["id"])
        self.assertTrue(close, self.diag())
        self.assertEqual(close[0]["bytes_up"], 0, close)
        # The upstream was dialled (before the 200), and sent nothing: no handshake began.
        self.assertEqual(len(self.upstream_accepts()), before + 1)
        self.assertNotIn("forbidden.test", self.handshakes())

    def test_openssl_with_the_connect_host_passes(self):
        _, out, err = self.s_client("allowed.test")
        self.assertIn("HTTP/1.1 200", out, err)
        self.assertEqual(self.handshakes()[-1], "allowed.test")

    def test_case_and_trailing_dot_do_not_matter(self):
        _, out, err = self.s_client("ALLOWED.test.")
        self.assertIn("HTTP/1.1 200", out, err)

    def test_a_hello_one_byte_per_segment(self):
        self.assertTrue(self.tls_by_hand("allowed.test", 1).startswith("HTTP/1.1 200 "))
        self.assertEqual(self.handshakes()[-1], "allowed.test")
        self.assertIn("ALERT_ACCESS_DENIED", self.tls_by_hand("forbidden.test", 1))
        rec = self.deny_record(self.proxy, "sni_mismatch")
        self.assertIn('"forbidden.test"', rec["detail"])
        self.assertNotIn("forbidden.test", self.handshakes())

    def test_no_sni_and_non_tls_go_ahead(self):
        self.assertTrue(self.tls_by_hand(None, 4096).startswith("HTTP/1.1 200 "))
        self.assertIsNone(self.handshakes()[-1])
        c, resp = self.tunnel("allowed.test:443")   # the echo server: not TLS
        self.assertStatus(resp, 200)
        c.send(b"SSH-2.0-test\r\n")
        self.assertEqual(c.recv_exact(14), b"SSH-2.0-test\r\n")


class RequireModeTest(TunnelTlsCase):
    proxy_config = dict(TunnelTlsCase.proxy_config, tunnel_tls="require")

    def test_tls_with_the_connect_host_passes(self):
        r = self.curl_https()
        self.assertEqual((r.rc, r.http_code), (0, 200), r.stderr)

    def test_not_tls_is_refused(self):
        c, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)
        c.send(b"SSH-2.0-test\r\n")
        self.assertEqual(c.read_to_eof(timeout=LIVENESS_S), b"", "a non-TLS tunnel got an answer")
        rec = self.deny_record(self.proxy, "not_tls")
        self.assertIn("require", rec["detail"])

    def test_a_hello_without_a_name_is_refused(self):
        self.assertIn("ALERT_ACCESS_DENIED", self.tls_by_hand(None, 4096))
        self.deny_record(self.proxy, "no_sni")


class OffModeTest(TunnelTlsCase):
    proxy_config = dict(TunnelTlsCase.proxy_config, tunnel_tls="off")

    def test_nothing_is_checked(self):
        _, out, err = self.s_client("forbidden.test")
        self.assertIn("HTTP/1.1 200", out, err)
        self.assertEqual(self.handshakes()[-1], "forbidden.test")


if __name__ == "__main__":
    base.main()
