#!/usr/bin/env python3
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
import signal
import stat
import subprocess
import time

from harness import base
from harness.control import ControlConn, TestCa, credentials_pipe
from harness.wait import poll, wait_until, within


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
