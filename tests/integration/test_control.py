"""The control API over mutual TLS against the real vibepit-proxy, and the vibepit CLI.

- the handshake matrix, with curl and openssl s_client as the clients;
- standalone credentials (--session-dir) on disk;
- the CLI end to end: a denied CONNECT, `vibepit allow-http`, the same CONNECT allowed,
  .vibepit/network.yaml with its comments, `vibepit logs --json`;
- 1 000 rules added one by one while vibepit-bench drives CONNECT traffic: every request
  after an `added` answer sees its rule, and no request fails;
- bad input, after which the proxy still serves.
"""

import json
import os
import re
import stat
import subprocess
import time

from tests.integration.harness import base
from tests.integration.harness.control import ControlConn, TestCa, credentials_pipe
from tests.integration.harness.wait import poll, within


LOAD_SERVER = "198.51.100.20:7000"  # vibepit-bench serve --kind echo, in the fake internet
# The control API listens on its own loopback address: control-listen may share none with
# proxy-listen (127.0.0.1 in the harness).
CHOST = "127.0.0.2"


def control_config(**extra):
    cfg = {"control_listen": [CHOST + ":0"], "control_timeout_ms": 1500}
    cfg.update(extra)
    return cfg


class ControlCase(base.TopologyCase):
    """A class-wide proxy with the control API; subclasses start it in start_control()."""

    ipv6 = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.proxy = cls.start_control()
            cls.cport = cls.proxy.control_listeners[0][1]
        except BaseException:
            cls.topo.close()
            raise


class HandshakeMatrix(ControlCase):
    """The server's credentials come from a CA this test holds, over --credentials-fd."""

    @classmethod
    def start_control(cls):
        d = os.path.join(cls.topo.tmp, "pki")
        cls.ca = TestCa(d)
        cls.other = TestCa(os.path.join(d, "other"), name="other-ca")
        srv_cert, srv_key = cls.ca.issue("server", "serverAuth", san="IP:" + CHOST)
        cls.server_cert = srv_cert
        cls.client = cls.ca.issue("client", "clientAuth")
        cls.expired = cls.ca.issue("expired", "clientAuth", days=-1)
        cls.foreign = cls.other.issue("foreign", "clientAuth")
        cls.server_as_client = (srv_cert, srv_key)
        fd = credentials_pipe(cls.ca.server_set_json(srv_cert, srv_key))
        try:
            return cls.make_proxy(**control_config(), extra_args=["--credentials-fd", str(fd)],
                                  pass_fds=[fd])
        finally:
            os.close(fd)

    def curl(self, *args, timeout=8):
        argv = ["curl", "-q", "-sS", "--max-time", str(timeout), "-o", "-", "-w", "\n@@%{http_code}"]
        r = self.topo.run(self.topo.px, argv + list(args), timeout=timeout + 5)
        out = r.stdout.decode("utf-8", "replace")
        code = int(out.rsplit("@@", 1)[1]) if "@@" in out else 0
        return r.returncode, code, out.rsplit("\n@@", 1)[0], r.stderr.decode("utf-8", "replace")

    def https(self, cert=None, key=None, cacert=None, extra=()):
        args = ["--cacert", cacert or self.ca.cert]
        if cert:
            args += ["--cert", cert, "--key", key]
        return self.curl(*(args + list(extra) + ["https://%s:%d/v1/health" % (CHOST, self.cport)]))

    def s_client(self, cert=None, key=None, extra=(),
                 request=b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        argv = ["openssl", "s_client", "-connect", "%s:%d" % (CHOST, self.cport), "-CAfile", self.ca.cert,
                "-verify_return_error", "-quiet"]
        if cert:
            argv += ["-cert", cert, "-key", key]
        r = self.topo.run(self.topo.px, argv + list(extra), timeout=10, input=request)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def test_valid_client_curl(self):
        rc, code, body, err = self.https(*self.client)
        self.assertEqual((rc, code), (0, 200), err)
        self.assertEqual(json.loads(body)["status"], "ok")

    def test_valid_client_openssl(self):
        rc, out, err = self.s_client(*self.client)
        self.assertIn("HTTP/1.1 200 OK", out, err)
        self.assertIn('"status":"ok"', out)

    def assertRejected(self, cert=None, key=None, alert=None, curl_extra=(), s_client_extra=()):
        """Both real clients are refused: no HTTP answer, and s_client names the TLS alert."""
        rc, code, _, err = self.https(cert, key, extra=curl_extra)
        self.assertNotEqual(rc, 0, err)
        self.assertEqual(code, 0, "an HTTP answer came through: " + err)
        rc, out, err = self.s_client(cert, key, extra=s_client_extra)
        self.assertNotIn("HTTP/1.1", out)
        if alert:
            self.assertIn(alert, err)

    def test_no_client_certificate(self):
        self.assertRejected(alert="certificate required")

    def test_client_certificate_from_another_ca(self):
        self.assertRejected(*self.foreign, alert="unknown ca")

    def test_expired_client_certificate(self):
        self.assertRejected(*self.expired, alert="certificate expired")

    def test_server_certificate_cannot_act_as_client(self):
        self.assertRejected(*self.server_as_client, alert="unsupported certificate")

    def test_tls12_only_is_refused(self):
        self.assertRejected(*self.client, alert="protocol version", curl_extra=["--tls-max", "1.2"],
                            s_client_extra=["-tls1_2"])

    def test_client_pins_the_session_ca(self):
        # A client that trusts another CA refuses this server.
        rc, code, _, err = self.https(*self.client, cacert=self.other.cert)
        self.assertNotEqual(rc, 0)
        self.assertEqual(code, 0)

    def test_plain_http_is_answered_at_once(self):
        # A 400 is an answer; a server that waited for a handshake would only drop the
        # client at control-timeout-ms, with no status (code 0).
        rc, code, body, err = self.curl("http://%s:%d/v1/health" % (CHOST, self.cport))
        self.assertEqual(code, 400, err)
        self.assertIn("TLS", body)

    def test_silent_client_is_dropped(self):
        # dropped by control-timeout-ms (1500) with slack; still open then fails the test
        s = self.topo.connect(self.topo.px, CHOST, self.cport, timeout=within(1.5))
        try:
            data = s.recv(100)
        except TimeoutError:
            self.fail("a silent client must be dropped at the deadline; still open after %g s"
                      % within(1.5))
        except OSError:
            data = b""
        finally:
            s.close()
        self.assertEqual(data, b"")

    def test_still_serving_after_the_matrix(self):
        for _ in range(3):
            self.test_no_client_certificate()
            self.test_plain_http_is_answered_at_once()
        self.test_valid_client_curl()
        # The refusals are counted where an operator can see them.
        rc, code, body, err = self.curl("--cacert", self.ca.cert, "--cert", self.client[0], "--key",
                                        self.client[1], "https://%s:%d/metrics" % (CHOST, self.cport))
        self.assertEqual(code, 200, err)
        counts = dict(re.findall(r'vibepit_control_errors_total\{kind="(\w+)"\} (\d+)', body))
        self.assertGreaterEqual(int(counts["plain_http"]), 3, body)
        self.assertGreaterEqual(int(counts["handshake"]), 3, body)


class Standalone(ControlCase):
    """vibepit-proxy --session-dir DIR: credentials made in the proxy, the CLI against it."""

    @classmethod
    def start_control(cls):
        cls.session_dir = os.path.join(cls.topo.tmp, "state", "vibepit", "sessions", "s1")
        return cls.make_proxy(**control_config(control_rate=0), allow_http=["allowed.test:443", LOAD_SERVER],
                              decision_ring=5000, extra_args=["--session-dir", cls.session_dir])

    def conn(self):
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(c.close)
        return c

    def vibepit(self, *args, cwd=None, timeout=20):
        argv = [os.path.join(base.BIN_DIR, "vibepit")] + list(args)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.topo.tmp}
        r = subprocess.run(["ip", "netns", "exec", self.topo.px] + argv, capture_output=True,
                           timeout=timeout, env=env, cwd=cwd or self.topo.tmp)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def test_session_directory_is_private(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.session_dir).st_mode), 0o700)
        names = sorted(os.listdir(self.session_dir))
        self.assertEqual(names, ["ca.pem", "client-key.pem", "client.pem", "session.json"])
        for n in names:
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.session_dir, n)).st_mode), 0o600, n)
        with open(os.path.join(self.session_dir, "session.json")) as f:
            info = json.load(f)
        self.assertEqual(info["control"], "%s:%d" % (CHOST, self.cport))
        self.assertEqual(info["id"], "s1")
        # Exactly one private key on disk: the client's.
        keys = []
        for n in names:
            with open(os.path.join(self.session_dir, n)) as f:
                if "PRIVATE KEY" in f.read():
                    keys.append(n)
        self.assertEqual(keys, ["client-key.pem"])
        self.assertNotIn("PRIVATE KEY", self.proxy.stderr())

    def test_cli_allow_http_with_methods_and_a_path(self):
        """A method/path rule added at runtime decides the host's next requests one by one:
        allowed and refused on one keep-alive connection, each recorded with its path."""
        target = "paths.wild.test"
        rc, out, err = self.vibepit("allow-http", "--session", self.session_dir, "--no-save",
                                    "%s:80 GET,HEAD /repos/acme/**" % target)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("+ %s:80 GET,HEAD /repos/acme/**" % target, out)
        c = self.raw()
        req = "%s http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n"
        ok = c.request(req % ("GET", target, "/repos/acme/w/./x/../pulls?state=open", target))
        self.assertStatus(ok, 200)
        self.assertEqual(ok.json()["target"], "/repos/acme/w/pulls?state=open")
        denied = c.request(req % ("POST", target, "/gists", target))
        self.assertStatus(denied, 403)
        self.assertIn("POST /gists is not allowed", denied.text)
        self.assertIn("error=http_request_denied", denied.header("proxy-status"))
        again = c.request(req % ("HEAD", target, "/repos/acme", target))
        self.assertStatus(again, 200)
        recs = self.proxy.wait_records(lambda r: r.get("host") == target and r.get("event") == "decision",
                                       count=3)
        self.assertEqual([(r["method"], r.get("path"), r["verdict"]) for r in recs[-3:]],
                         [("GET", "/repos/acme/w/pulls", "allow"), ("POST", "/gists", "deny"),
                          ("HEAD", "/repos/acme", "allow")], recs)
        self.assertEqual(recs[-3]["rule"], "%s:80 GET,HEAD /repos/acme/**" % target)
        # Traversal that is encoded is refused before anything is dialled.
        bad = self.raw().request(req % ("GET", target, "/repos/acme/%2e%2e/%2e%2e/gists", target))
        self.assertStatus(bad, 400)
        self.assertIn("encoded '.' or '..' segment", bad.text)

    def test_cli_allow_http_end_to_end(self):
        target = "cli.wild.test"
        r = self.curl("http://%s/" % target, tunnel=True)
        self.assertEqual(r.connect_code, 403, "%r%s" % (r, self.diag()))

        project = os.path.join(self.topo.tmp, "project")
        os.makedirs(os.path.join(project, ".vibepit"), exist_ok=True)
        yaml_path = os.path.join(project, ".vibepit", "network.yaml")
        with open(yaml_path, "w") as f:
            f.write("# network policy for this project\nallow-http:\n"
                    "  - allowed.test:443  # the fake internet\nallow-dns: []\n")
        rc, out, err = self.vibepit("allow-http", "--session", self.session_dir, "%s:80" % target,
                                    cwd=project)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("+ %s:80" % target, out)

        r = self.curl("http://%s/after" % target, tunnel=True)
        self.assertEqual((r.rc, r.connect_code, r.http_code), (0, 200, 200), "%r%s" % (r, self.diag()))

        with open(yaml_path) as f:
            text = f.read()
        self.assertIn("# network policy for this project", text)
        self.assertIn("allowed.test:443  # the fake internet", text)
        self.assertIn("%s:80" % target, text)

        rc, out, err = self.vibepit("logs", "--json", "--session", self.session_dir)
        self.assertEqual(rc, 0, err)
        mine = [json.loads(line) for line in out.splitlines()
                if line.strip() and json.loads(line).get("host") == target
                and json.loads(line).get("event") == "decision"]
        self.assertEqual([r["verdict"] for r in mine], ["deny", "allow"], out)
        self.assertEqual(mine[1]["rule"], "%s:80" % target)

        rc, out, err = self.vibepit("logs", "--denied", "--session", self.session_dir)
        self.assertEqual(rc, 0, err)
        self.assertIn(target, out)
        self.assertNotIn("ALLOW", out)

    def test_cli_validates_locally_and_reports_exit_codes(self):
        rc, out, err = self.vibepit("allow-http", "--session", self.session_dir, "--no-save", "*:443")
        self.assertEqual(rc, 2)
        self.assertIn("allow-http entry \"*:443\"", err)
        rc, out, err = self.vibepit("rules", "--session", "nope")
        self.assertEqual(rc, 3)
        self.assertIn("vibepit status", err)
        rc, out, err = self.vibepit("rules", "--json", "--session", self.session_dir)
        self.assertEqual(rc, 0, err)
        self.assertIn("allowed.test:443", json.loads(out)["allow-http"])
        rc, out, err = self.vibepit("status", "--json", "--sessions-dir", os.path.dirname(self.session_dir))
        self.assertEqual(rc, 0, err)
        self.assertEqual([s["id"] for s in json.loads(out)], ["s1"])

    def test_rules_added_under_load_are_seen_at_once(self):
        bench = os.path.join(base.BIN_DIR, "vibepit-bench")
        out_path = os.path.join(self.topo.tmp, "load.json")
        # Thousands of short tunnels a second: let TIME_WAIT ports be reused in this namespace,
        # or the ephemeral ports run out and every connect slows down.
        self.topo.run(self.topo.px, ["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1",
                                     "net.ipv4.ip_local_port_range=10000 65535"])
        # The load's upstream is vibepit-bench's own echo server: the Python fakes would be
        # the bottleneck. It is allowed by an IP-literal rule, so no lookup is involved.
        self.topo.popen(self.topo.net, [bench, "serve", "--listen", LOAD_SERVER, "--kind", "echo",
                                        "--threads", "1", "--duration", "600"], log="load-echo")
        self.topo.wait_port(self.topo.px, *LOAD_SERVER.split(":")[:1], int(LOAD_SERVER.split(":")[1]))
        with open(out_path, "wb") as out:
            load = self.topo.popen(self.topo.px, [bench, "connect-rate", "--proxy",
                                                  "127.0.0.1:%d" % self.proxy.port, "--target",
                                                  LOAD_SERVER, "--concurrency", "8",
                                                  "--duration", "120", "--max", "2000000",
                                                  "--linger0"],
                                   stdout=out)
        c = self.conn()
        gen0 = c.request("GET", "/v1/health").json()["generation"]
        t0 = time.monotonic()
        try:
            for i in range(1000):
                host = "u%d.wild.test" % i
                r = c.post("/v1/allow-http", {"entries": ["%s:443" % host]})
                self.assertEqual(r.status, 200, r)
                self.assertEqual(r.json()["added"], ["%s:443" % host])
                self.assertEqual(r.json()["generation"], gen0 + i + 1)
                # The very next request sees the rule. (Not assertStatus: its message reads the
                # whole decision log, which the load makes long.)
                conn, resp = self.tunnel("%s:443" % host)
                conn.close()
                if resp.status != 200:
                    self.fail("after %s was added: %r" % (host, resp))
                self.assertTrue(load.poll() is None, "the load generator stopped early")
        finally:
            load.send_signal(2)
            load.wait(30)
        print("  1000 rules added and checked in %.1f s under load" % (time.monotonic() - t0))
        with open(out_path) as f:
            result = json.load(f)
        self.assertGreater(result["results"]["tunnels"], 100, result)
        self.assertEqual(result["errors"]["total"], 0, result)
        rules = c.request("GET", "/v1/rules").json()
        self.assertEqual(len(rules["allow-http"]), len(set(rules["allow-http"])))
        self.assertIn("u999.wild.test:443", rules["allow-http"])

    def test_bad_input_gets_the_right_status(self):
        c = self.conn()
        cases = [
            ("POST", "/v1/allow-http", "{not json", 400, "not valid JSON"),
            ("POST", "/v1/allow-http", json.dumps({"entries": ["a%d.test:443" % i for i in range(10000)]}),
             413, "too many entries"),
            ("POST", "/v1/allow-dns", json.dumps({"entries": ["ok.test", "bad..name"]}), 400, "bad..name"),
            ("GET", "/v1/nothing", None, 404, "no such endpoint"),
            ("GET", "/v1/allow-http", None, 405, "use POST"),
            ("GET", "/v1/decisions?limit=0", None, 400, "limit"),
        ]
        for method, path, body, status, says in cases:
            r = c.request(method, path, body)
            self.assertEqual(r.status, status, (method, path, r))
            self.assertEqual(r.headers.get("content-type"), "application/json")
            self.assertIn(says, r.json()["error"])
        self.assertNotIn("ok.test", c.request("GET", "/v1/rules").json()["allow-dns"])

        # A body over control-max-body: 413, and the connection is closed.
        huge = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(huge.close)
        huge.sock.sendall(b"POST /v1/allow-http HTTP/1.1\r\nContent-Length: 5000000\r\n\r\n")
        r = huge.read_response()
        self.assertEqual(r.status, 413, r)
        # A head that never ends: 431.
        big = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(big.close)
        big.sock.sendall(b"GET /v1/health HTTP/1.1\r\nX: " + b"a" * 20000)
        self.assertEqual(big.read_response().status, 431)

        # Still serving: the API and the data path.
        self.assertEqual(self.conn().request("GET", "/v1/health").status, 200)
        conn, resp = self.tunnel("allowed.test:443")
        self.assertStatus(resp, 200)

    def test_decisions_paging_reports_loss(self):
        c = self.conn()
        first = c.request("GET", "/v1/decisions?limit=1").json()
        self.assertEqual(first["lost"], 0)
        last = c.request("GET", "/v1/decisions?limit=1000&after=%d" % first["next"]).json()
        after = last["next"]
        stats = c.request("GET", "/v1/stats").json()
        self.assertIn("totals", stats)
        metrics = c.request("GET", "/metrics")
        self.assertIn("vibepit_decisions_total", metrics.body)
        self.assertTrue(metrics.headers["content-type"].startswith("text/plain"))
        # The heap gauge: glibc's figures, absent where a sanitizer owns the heap.
        if self.proxy.sanitized():
            self.assertNotIn("heap", stats)
            self.assertNotIn("vibepit_heap_bytes", metrics.body)
        else:
            self.assertGreater(stats["heap"]["in_use"], 1 << 20, stats["heap"])
            self.assertGreaterEqual(stats["heap"]["in_use"], stats["heap"]["mapped"])
            self.assertRegex(metrics.body, r'\nvibepit_heap_bytes\{state="in_use"\} [1-9][0-9]{6,}\n')
            self.assertRegex(metrics.body, r'\nvibepit_heap_bytes\{state="free"\} [0-9]+\n')
        # A CONNECT now shows up after `after`.
        conn, resp = self.tunnel("denied-paging.test:443")
        self.assertStatus(resp, 403)
        got = poll(lambda: c.request("GET", "/v1/decisions?after=%d" % after).json(),
                   lambda got: any(r.get("host") == "denied-paging.test" for r in got["records"]))
        self.assertTrue(any(r.get("host") == "denied-paging.test" for r in got["records"]),
                        "the decision did not reach the API")


class OverAUnixSocket(base.TopologyCase):
    """control-socket alone, as a vibepit session's proxy has it: no TCP listener, a socket
    only its user may connect to, and the CLI reaching it through session.json's
    unix:PATH."""

    ipv6 = False

    def test_the_socket_alone_serves_the_cli(self):
        import socket
        sdir = os.path.join(self.topo.tmp, "state", "vibepit", "sessions", "u1")
        sock = os.path.join(self.topo.tmp, "ctl", "control.sock")
        os.makedirs(os.path.dirname(sock))
        left = socket.socket(socket.AF_UNIX)  # an earlier run's socket: replaced
        left.bind(sock)
        left.close()
        proxy = self.start_proxy(control_socket=sock, allow_http=["allowed.test:443"],
                                 extra_args=["--session-dir", sdir])
        self.assertTrue(poll(lambda: "ready:" in proxy.stderr(), bool, timeout=10), proxy.stderr())
        self.assertEqual(proxy.control_listeners, [])
        self.assertIn("listening control unix:" + sock, proxy.stderr())
        self.assertNotRegex(proxy.stderr(), r"listening control \d")
        st = os.stat(sock)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        with open(os.path.join(sdir, "session.json")) as f:
            self.assertEqual(json.load(f)["control"], "unix:" + sock)

        def vibepit(*args):
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.topo.tmp}
            return subprocess.run([os.path.join(base.BIN_DIR, "vibepit")] + list(args),
                                  capture_output=True, text=True, timeout=20, env=env,
                                  cwd=self.topo.tmp)
        r = vibepit("allow-http", "--no-save", "--session", sdir, "cli.test:443")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = vibepit("rules", "--json", "--session", sdir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(json.loads(r.stdout)["allow-http"]),
                         ["allowed.test:443", "cli.test:443"])

    def test_a_path_that_is_not_a_socket_is_not_replaced(self):
        sdir = os.path.join(self.topo.tmp, "state", "vibepit", "sessions", "u2")
        path = os.path.join(self.topo.tmp, "not-a-socket")
        with open(path, "w") as f:
            f.write("keep me")
        proxy = self.make_proxy(control_socket=path, extra_args=["--session-dir", sdir])
        self.assertTrue(poll(lambda: proxy.proc.poll() is not None, bool, timeout=10), proxy.stderr())
        self.assertNotEqual(proxy.proc.returncode, 0)
        self.assertIn("control-socket %s: " % path, proxy.stderr())
        with open(path) as f:
            self.assertEqual(f.read(), "keep me")


if __name__ == "__main__":
    base.main()
