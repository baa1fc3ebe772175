"""Absolute-form HTTP forwarding: rewriting, hop-by-hop headers, keep-alive,
refusals, and request smuggling attempts (all refused with 400)."""

import hashlib
import json
import socket
import threading
import time

from tests.integration.harness import base
from tests.integration.harness.client import Closed
from tests.integration.harness.wait import LIVENESS_S, poll, within

RULES = ["allowed.test:80", "allowed.test:8080", "nx.test:80", "dead.test:80", "third.test:80"]


def get(url, host, extra=""):
    return "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (url, host, extra)


class ForwardTest(base.TopologyCase):
    proxy_config = {"allow_http": RULES}

    def test_forwarded_in_origin_form(self):
        r = self.curl("http://allowed.test/path/x?q=1&r=%20")
        self.assertEqual((r.rc, r.http_code), (0, 200), "%r%s" % (r, self.diag()))
        echo = r.json()
        self.assertEqual(echo["method"], "GET")
        self.assertEqual(echo["target"], "/path/x?q=1&r=%20")
        self.assertEqual(echo["host"], "allowed.test")
        self.assertEqual(echo["local"], "198.51.100.10:80")

    def test_port_and_host_header(self):
        r = self.curl("http://allowed.test:8080/p")
        self.assertEqual(r.http_code, 200, "%r%s" % (r, self.diag()))
        echo = r.json()
        self.assertEqual(echo["local"], "198.51.100.10:8080")
        self.assertEqual(echo["host"], "allowed.test:8080")

    def test_request_bodies(self):
        body = bytes(range(256)) * 300
        c = self.raw()
        resp = c.request(b"POST http://allowed.test/cl HTTP/1.1\r\nHost: allowed.test\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.assertStatus(resp, 200)
        echo = resp.json()
        self.assertEqual((echo["method"], echo["body_length"]), ("POST", len(body)))
        self.assertEqual(echo["body_sha256"], hashlib.sha256(body).hexdigest())
        resp = c.request("POST http://allowed.test/chunked HTTP/1.1\r\nHost: allowed.test\r\n"
                         "Transfer-Encoding: chunked\r\n\r\n"
                         "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: 1\r\n\r\n")
        self.assertStatus(resp, 200)
        echo = resp.json()
        self.assertEqual(echo["body_length"], 11)
        self.assertEqual(echo["body_sha256"], hashlib.sha256(b"hello world").hexdigest())
        resp = c.request(get("http://allowed.test/after", "allowed.test"))   # framing stayed in sync
        self.assertEqual(resp.json()["target"], "/after")

    def test_hop_by_hop_headers_not_forwarded(self):
        c = self.raw()
        resp = c.request(get("http://allowed.test/h", "allowed.test",
                             "Proxy-Authorization: Basic c2VjcmV0OnNlY3JldA==\r\n"
                             "Proxy-Connection: keep-alive\r\n"
                             "Connection: keep-alive, X-Secret\r\n"
                             "X-Secret: do-not-forward\r\n"
                             "Keep-Alive: timeout=5\r\n"
                             "X-Keep: forwarded\r\n"))
        self.assertStatus(resp, 200)
        names = [k.lower() for k, _ in resp.json()["headers"]]
        for hop in ("proxy-authorization", "proxy-connection", "x-secret", "keep-alive"):
            self.assertNotIn(hop, names, resp.json()["headers"])
        self.assertIn("x-keep", names)

    def test_keep_alive_second_request_denied(self):
        c = self.raw()
        first = c.request(get("http://allowed.test/1", "allowed.test"))
        self.assertStatus(first, 200)
        second = c.request(get("http://other.test/2", "other.test"))
        self.assertStatus(second, 403)
        self.assertIn("vibepit allow-http other.test:80", second.text)

    def test_keep_alive_with_curl(self):
        r = self.curl("-v", "http://allowed.test/1", "http://other.test/2")
        self.assertEqual([t[0] for t in r.transfers], [200, 403], "%r%s" % (r, self.diag()))
        self.assertIn("Re-using existing connection", r.stderr)
        self.assertEqual(sum(t[2] for t in r.transfers), 1, "one proxy connection for both")

    def test_keep_alive_two_allowed_hosts(self):
        c = self.raw()
        for host, addr in (("allowed.test", "198.51.100.10:80"), ("third.test", "198.51.100.13:80"),
                           ("allowed.test", "198.51.100.10:80")):
            resp = c.request(get("http://%s/k" % host, host))
            self.assertStatus(resp, 200)
            self.assertEqual(resp.json()["local"], addr)

    def test_bodyless_responses_keep_framing(self):
        """HEAD, 204 and 304 carry no body: the next response on the connection must parse."""
        c = self.raw()
        resp = c.request("HEAD http://allowed.test/head HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b"")
        for code in (204, 304):
            resp = c.request(get("http://allowed.test/status/%d" % code, "allowed.test"))
            self.assertStatus(resp, code)
        resp = c.request(get("http://allowed.test/last", "allowed.test"))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json()["target"], "/last")

    def test_pipelined_requests(self):
        c = self.raw()
        c.send(get("http://allowed.test/p1", "allowed.test") + get("http://allowed.test/p2", "allowed.test")
               + get("http://other.test/p3", "other.test"))
        targets = [c.read_response("GET") for _ in range(3)]
        self.assertEqual([r.status for r in targets], [200, 200, 403], targets)
        self.assertEqual([r.json()["target"] for r in targets[:2]], ["/p1", "/p2"])

    def test_http10_client(self):
        r = self.curl("--http1.0", "http://allowed.test/ten")
        self.assertEqual(r.http_code, 200, r)
        self.assertEqual(r.json()["target"], "/ten")

    def test_expect_100_continue(self):
        body = b"e" * 5000
        c = self.raw()
        c.send("POST http://allowed.test/expect HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n"
               "Expect: 100-continue\r\n\r\n" % len(body))
        c.sock.settimeout(1.5)
        try:
            interim = c.read_response("POST")
            self.assertEqual(interim.status, 100, interim)
        except socket.timeout:
            pass                         # no 100: clients send the body after a pause anyway
        c.sock.settimeout(LIVENESS_S)
        c.send(body)
        resp = c.read_response("POST")
        if resp.status == 100:           # the 100 came after the pause: the answer follows
            resp = c.read_response("POST")
        self.assertStatus(resp, 200)
        self.assertEqual(resp.json()["body_length"], len(body))

    def test_expect_is_answered_here_whatever_its_case(self):
        """The proxy sends its own 100: the expectation must not reach upstream too."""
        for name in ("Expect", "expect", "EXPECT"):
            with self.subTest(name=name):
                c = self.raw()
                c.send("POST http://allowed.test/e HTTP/1.1\r\nHost: allowed.test\r\n"
                       "Content-Length: 2\r\n%s: 100-continue\r\n\r\n" % name)
                self.assertEqual(c.read_response("POST").status, 100)
                c.send(b"ok")
                resp = c.read_response("POST")
                self.assertStatus(resp, 200)
                names = [k.lower() for k, _ in resp.json()["headers"]]
                self.assertNotIn("expect", names, resp.json()["headers"])

    def test_content_length_goes_upstream_in_canonical_form(self):
        for fields in ("Content-Length: 005\r\n", "Content-Length: 5, 5\r\n",
                       "Content-Length: 5\r\nContent-Length: 05\r\n"):
            with self.subTest(fields=fields):
                resp = self.raw().request("POST http://allowed.test/cl HTTP/1.1\r\n"
                                          "Host: allowed.test\r\n%s\r\nhello" % fields)
                self.assertStatus(resp, 200)
                echo = resp.json()
                lengths = [v for k, v in echo["headers"] if k.lower() == "content-length"]
                self.assertEqual((lengths, echo["body_length"]), (["5"], 5), fields)

    # ------------------------------------------------------------ refused

    def test_denied(self):
        r = self.curl("http://other.test/")
        self.assertEqual(r.http_code, 403, r)
        self.assertIn("vibepit allow-http other.test:80", r.text)
        r = self.curl("http://allowed.test:8443/")
        self.assertEqual(r.http_code, 403, r)
        self.assertIn("vibepit allow-http allowed.test:8443", r.text)

    def test_host_mismatch(self):
        resp = self.raw().request(get("http://allowed.test/", "other.test"))
        self.assertStatus(resp, 400)

    def test_https_absolute_form(self):
        resp = self.raw().request(get("https://allowed.test/", "allowed.test"))
        self.assertStatus(resp, 400)
        self.assertIn("CONNECT", resp.text)

    def test_userinfo_and_missing_host(self):
        cases = [  # (request, why)
            (get("http://user@allowed.test/", "allowed.test"), "userinfo"),
            (get("http://allowed.test@other.test/", "other.test"), "userinfo that looks like a host"),
            ("GET http://allowed.test/ HTTP/1.1\r\n\r\n", "HTTP/1.1 without Host"),
            (get("http://allowed.test/", "allowed.test:8080"), "Host port differs"),
        ]
        for req, why in cases:
            with self.subTest(why=why):
                self.assertStatus(self.raw().request(req), 400)

    def test_origin_form(self):
        resp = self.raw().request(get("/", "allowed.test"))
        self.assertStatus(resp, 400)

    def test_unresolvable_and_dead(self):
        r = self.curl("http://nx.test/")
        self.assertIn(r.http_code, (502, 403), r)
        self.assertIn("could not resolve", r.text)
        r = self.curl("http://dead.test/")
        self.assertEqual(r.http_code, 502, r)

    def test_blocked_literal(self):
        r = self.curl("http://10.0.0.1/")
        self.assertEqual(r.http_code, 403, r)
        self.assertIn("10.0.0.0/8", r.text)
        self.assertNoCanaryHits()

    def test_decision_record_for_get(self):
        self.curl("http://allowed.test/logged")
        d = self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("method") == "GET"
                                    and r.get("host") == "allowed.test")
        self.assertTrue(d, self.diag())
        self.assertEqual(d[-1]["verdict"], "allow")
        self.assertEqual(str(d[-1]["port"]), "80")
        self.assertEqual(d[-1]["rule"], "allowed.test:80")


class BadUpstreamTest(base.TopologyCase):
    """The upstream misbehaves: the client gets a 502 (or sees the cut), never a hang."""
    proxy_config = {"allow_http": RULES}

    def test_invalid_responses_502(self):
        for name in ("cl-te", "two-cl", "garbage", "nothing", "huge-head"):
            with self.subTest(name=name):
                resp = self.raw().request(get("http://allowed.test/raw/" + name, "allowed.test"))
                self.assertStatus(resp, 502)
        self.assertTrue(self.proxy.alive())

    def test_body_until_close(self):
        c = self.raw()
        resp = c.request(get("http://allowed.test/raw/until-close", "allowed.test"))
        self.assertStatus(resp, 200)
        self.assertEqual(resp.body, b"body until close")

    def test_truncated_body_is_cut_not_completed(self):
        c = self.raw(timeout=3)
        with self.assertRaises(Closed):    # 9 of 100 bytes, then the connection ends
            c.request(get("http://allowed.test/raw/short-body", "allowed.test"))


class RefusalRecordTest(base.TopologyCase):
    """Every refusal leaves exactly one deny record, with the status the client got
    (invariant 5). A request whose head cannot be parsed at all has nothing to decide on."""
    proxy_config = {"allow_http": RULES}

    def test_each_refusal_writes_one_deny_record(self):
        te_and_cl = ("POST http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n"
                     "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        cases = [  # (request, status, reason, host, why)
            (get("http://-bad.test/", "-bad.test"), 400, "invalid_target", "-bad.test",
             "invalid absolute-form target"),
            # Records keep the authority only: no path, query or credential (docs/security.md).
            (get("http://user:SECRET@allowed.test/p?SECRET", "allowed.test"), 400,
             "invalid_target", "allowed.test", "userinfo"),
            (get("/SECRET?SECRET", "allowed.test"), 400, "invalid_target", "", "origin form"),
            ("CONNECT -bad.test:443 HTTP/1.1\r\n\r\n", 400, "invalid_target", "-bad.test:443",
             "invalid CONNECT target"),
            (get("https://allowed.test/", "allowed.test"), 400, "invalid_target", "allowed.test",
             "https:// in absolute form"),
            (get("ftp://allowed.test/SECRET", "allowed.test"), 400, "invalid_target", "allowed.test",
             "another scheme"),
            (get("http://allowed.test/", "other.test"), 400, "invalid_target", "allowed.test",
             "Host header mismatch"),
            ("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nHost: allowed.test\r\n\r\n",
             400, "invalid_target", "allowed.test", "two Host headers"),
            ("GET http://allowed.test/ HTTP/1.1\r\n\r\n", 400, "invalid_target", "allowed.test",
             "HTTP/1.1 without Host"),
            (te_and_cl, 400, "invalid_target", "allowed.test", "framing: CL and TE"),
            (get("http://other.test/", "other.test"), 403, "not_allowlisted", "other.test",
             "not allowlisted"),
            (get("http://10.0.0.1/", "10.0.0.1"), 403, "blocked_address", "10.0.0.1",
             "blocked literal"),
        ]
        for req, status, reason, host, why in cases:
            with self.subTest(why=why):
                c = self.raw(timeout=3)
                client = "127.0.0.1:%d" % c.sock.getsockname()[1]
                resp = c.request(req)
                self.assertEqual(resp.status, status, "%s: %r" % (why, resp))
                mine = lambda r, client=client: r.get("client") == client
                recs = self.proxy.wait_records(mine)
                time.sleep(0.2)  # a second record, if the proxy wrote one, arrives too
                recs = [r for r in self.proxy.records() if mine(r)]
                self.assertEqual(len(recs), 1, "%s: %r%s" % (why, recs, self.diag()))
                r = recs[0]
                self.assertEqual((r.get("verdict"), r.get("reason"), r.get("host"), r.get("status")),
                                 ("deny", reason, host, status), why)
                self.assertNotIn("SECRET", json.dumps(r), why)
                c.close()
        self.assertNoCanaryHits()


class DenyFloodTest(base.TopologyCase):
    """A client repeating denied requests cannot fill the log: past decision-log-per-client
    records a second, its denials are folded into one summary per second."""
    proxy_config = {"allow_http": RULES, "decision_log_per_client": 50}

    def test_denied_flood_is_folded_and_counted(self):
        n = 3000
        c = self.raw(timeout=30)
        client = "127.0.0.1:%d" % c.sock.getsockname()[1]
        request = get("http://other.test/", "other.test").encode()
        sender = threading.Thread(target=c.sock.sendall, args=(request * n,), daemon=True)
        sender.start()
        got, seen = b"", 0
        t0 = time.monotonic()
        deadline = time.monotonic() + 60
        while seen < n and time.monotonic() < deadline:
            chunk = c.sock.recv(1 << 20)
            if not chunk:
                break
            got += chunk
            seen = got.count(b"HTTP/1.1 403 Forbidden\r\n")
        seconds = time.monotonic() - t0
        sender.join(5)
        self.assertEqual(seen, n, "403s for %d of %d requests%s" % (seen, n, self.diag()))
        mine = lambda r: r.get("client") == client
        # summaries are written when their second ends
        recs = poll(lambda: [r for r in self.proxy.records() if mine(r)],
                    lambda recs: sum(r.get("count", 1) for r in recs) >= n, interval=0.1)
        whole = [r for r in recs if "count" not in r]
        summaries = [r for r in recs if "count" in r]
        self.assertEqual(sum(r.get("count", 1) for r in recs), n, "%d whole, %d summaries%s"
                         % (len(whole), len(summaries), self.diag()))
        self.assertTrue(summaries)
        # At most decision-log-per-client whole records and one summary for each second the
        # flood touched (docs/config.md): a bound in the flood's seconds, which a busy machine
        # stretches, not a fixed share of the denials.
        bound = (50 + 1) * (int(seconds) + 2)
        self.assertLessEqual(len(recs), bound, "%d records for %d denials in %.1f s" % (len(recs), n, seconds))
        for r in recs:
            self.assertEqual((r["verdict"], r["reason"], r["host"], r["status"]),
                             ("deny", "not_allowlisted", "other.test", 403), r)
        c.close()


class SmugglingTest(base.TopologyCase):
    """Every ambiguous framing is refused with 400 before anything goes upstream."""
    proxy_config = {"allow_http": RULES}

    def refused(self, req, why):
        # A request left hanging meets header-timeout-ms (408, not 400) or no answer by then
        # with slack.
        limit = within(self.proxy.config["header-timeout-ms"] / 1000.0)
        c = self.raw(timeout=limit)
        try:
            resp = c.request(req, "POST")
        except Closed:
            self.fail("%s: closed without a 400%s" % (why, self.diag()))
        except socket.timeout:
            self.fail("%s: no answer within %gs (request left hanging)%s" % (why, limit, self.diag()))
        self.assertEqual(resp.status, 400, "%s: %r%s" % (why, resp, self.diag()))
        return resp

    def post(self, headers, body=""):
        return "POST http://allowed.test/s HTTP/1.1\r\nHost: allowed.test\r\n%s\r\n%s" % (headers, body)

    def test_head_ambiguities(self):
        cases = [  # (request, why)
            (self.post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
             "Content-Length and Transfer-Encoding"),
            (self.post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"),
             "Transfer-Encoding and Content-Length"),
            (self.post("Content-Length: 5\r\nContent-Length: 6\r\n", "helloX"), "conflicting Content-Length"),
            (self.post("Content-Length: 5, 6\r\n", "helloX"), "Content-Length list"),
            (self.post("Content-Length: -1\r\n"), "negative Content-Length"),
            (self.post("Content-Length: 0x5\r\n", "hello"), "hex Content-Length"),
            (self.post("Content-Length: 99999999999999999999999\r\n"), "Content-Length overflow"),
            (self.post("Transfer-Encoding: gzip\r\n", "hello"), "gzip only"),
            (self.post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"), "chunked not final"),
            (self.post("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", "0\r\n\r\n"),
             "chunked not final (two fields)"),
            (self.post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"), "unknown coding"),
            (self.post("X-Folded: a\r\n  folded\r\n"), "obs-fold"),
            (self.post("X-Nul: a\x00b\r\n"), "NUL in value"),
            (self.post("X-Ctl: a\x01b\r\n"), "CTL in value"),
            (self.post("X-Bad\x00Name: a\r\n"), "NUL in name"),
            (self.post("Content-Length : 5\r\n", "hello"), "space before colon"),
            (self.post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n"), "space before colon (TE)"),
            ("POST http://allowed.test/s HTTP/1.1\r\nHost: allowed.test\r\nHost: other.test\r\n\r\n",
             "two Host headers"),
        ]
        before = len(self.topo.upstream_connections())
        for req, why in cases:
            with self.subTest(why=why):
                self.refused(req, why)
        self.assertTrue(self.proxy.alive())
        self.assertEqual(len(self.topo.upstream_connections()), before,
                         "a refused head must not open an upstream connection")

    def test_bad_chunk_framing(self):
        te = "Transfer-Encoding: chunked\r\n"
        cases = [
            (self.post(te, "zz\r\nhello\r\n0\r\n\r\n"), "invalid chunk size"),
            (self.post(te, "-5\r\nhello\r\n0\r\n\r\n"), "negative chunk size"),
            (self.post(te, "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n"), "chunk size overflow"),
            (self.post(te, "10000000001\r\nhello\r\n0\r\n\r\n"), "chunk larger than 2^40 bytes"),
            (self.post(te, "5\r\nhelloXX\r\n0\r\n\r\n"), "chunk data longer than size"),
            (self.post(te, " 5\r\nhello\r\n0\r\n\r\n"), "leading space in size"),
        ]
        for req, why in cases:
            with self.subTest(why=why):
                self.refused(req, why)
        self.assertTrue(self.proxy.alive())

    def test_smuggled_request_not_forwarded(self):
        """The classic CL.TE payload: whatever the proxy answers, upstream never sees /smuggled."""
        c = self.raw()
        c.send(self.post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                         "0\r\n\r\nGET http://allowed.test/smuggled HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))
        try:
            resp = c.read_response("POST")
            self.assertEqual(resp.status, 400, resp)
            c.closed_by_peer(2.0)
        except Closed:
            pass
        r = self.curl("http://allowed.test/check")
        self.assertEqual(r.http_code, 200, r)
        self.assertNotIn("smuggled", r.text)


if __name__ == "__main__":
    base.main()
