"""Ask mode against the real vibepit-proxy: a request that no rule allows is held.

- a held curl completes with 200 once `vibepit allow-http` covers it, without a retry, and the
  records say held, then released;
- POST /v1/pending/refuse and the time limit answer 403 with a reason that says which;
- what no rule could allow (an always-blocked literal) is refused at once and never held;
- past ask-max-per-client a request is refused at once, and an allowed one is still served;
- a client that hangs up leaves the pending list; /v1/stats counts the holds.
"""

import json
import os
import subprocess
import threading

from tests.integration.harness import base
from tests.integration.harness.control import ControlConn
from tests.integration.harness.wait import poll

CHOST = "127.0.0.2"


class AskCase(base.TopologyCase):
    """A class-wide proxy in ask mode, with a standalone control API."""

    ipv6 = False

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.session_dir = os.path.join(cls.topo.tmp, "state", "vibepit", "sessions", "ask")
            cls.proxy = cls.make_proxy(control_listen=[CHOST + ":0"], control_rate=0,
                                       allow_http=["allowed.test:80"], ask=True,
                                       ask_timeout_ms=20000, ask_max_per_client=4,
                                       extra_args=["--session-dir", cls.session_dir])
            cls.cport = cls.proxy.control_listeners[0][1]
        except BaseException:
            cls.topo.close()
            raise

    def conn(self):
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(c.close)
        return c

    def pending(self):
        r = self.conn().request("GET", "/v1/pending")
        self.assertEqual(r.status, 200, r)
        return r.json()["pending"]

    def held(self, host):
        return [p for p in self.pending() if p["host"] == host]

    def in_background(self, url):
        """curl through the proxy on a thread of its own; the result once it ends."""
        out = {}

        def run():
            out["r"] = self.curl(url, tunnel=True, timeout=30)

        t = threading.Thread(target=run, daemon=True)
        t.start()

        def result():
            t.join(40)
            self.assertFalse(t.is_alive(), "curl did not end")
            return out["r"]
        return result

    def vibepit(self, *args):
        argv = [os.path.join(base.BIN_DIR, "vibepit")] + list(args)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.topo.tmp}
        r = subprocess.run(["ip", "netns", "exec", self.topo.px] + argv, capture_output=True,
                           timeout=20, env=env, cwd=self.topo.tmp)
        return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")

    def records(self, host):
        rc, out, err = self.vibepit("logs", "--json", "-n", "1000", "--session", self.session_dir)
        self.assertEqual(rc, 0, err)
        return [r for r in map(json.loads, filter(str.strip, out.splitlines()))
                if r.get("host") == host and r.get("event") != "close"]

    def test_a_held_request_succeeds_once_allowed(self):
        host = "released.wild.test"
        result = self.in_background("http://%s/page" % host)
        waiting = poll(lambda: self.held(host), bool)
        self.assertTrue(waiting, "the CONNECT was not held%s" % self.diag())
        self.assertEqual((waiting[0]["method"], waiting[0]["port"]), ("CONNECT", 80))
        self.assertGreater(waiting[0]["expires_in_ms"], 10000)
        rc, out, err = self.vibepit("allow-http", "--no-save", "--session", self.session_dir,
                                    "%s:80" % host)
        self.assertEqual(rc, 0, out + err)
        r = result()
        self.assertEqual((r.rc, r.connect_code, r.http_code, r.num_connects), (0, 200, 200, 1),
                         "%r%s" % (r, self.diag()))
        self.assertEqual(self.held(host), [])
        recs = self.records(host)
        self.assertEqual([(x["event"], x.get("hold")) for x in recs],
                         [("held", None), ("decision", "released")], recs)
        self.assertEqual(recs[0]["id"], recs[1]["id"])
        self.assertEqual((recs[1]["verdict"], recs[1]["rule"], recs[1]["addr"]),
                         ("allow", "%s:80" % host, "198.51.100.12"))
        self.assertGreater(recs[1]["held_ms"], 0)

    def test_refused_and_expired_answer_403_saying_which(self):
        host = "refused.wild.test"
        result = self.in_background("http://%s/" % host)
        waiting = poll(lambda: self.held(host), bool)
        self.assertTrue(waiting, "the CONNECT was not held%s" % self.diag())
        r = self.conn().post("/v1/pending/refuse", {"id": waiting[0]["id"]})
        self.assertEqual(r.status, 200, r)
        r = result()
        self.assertEqual(r.connect_code, 403, r)
        self.assertIn("refused by the user", r.headers_text, r)

        c = self.conn()
        self.assertEqual(c.post("/v1/ask", {"timeout_ms": 1500}).json()["timeout_ms"], 1500)
        self.addCleanup(lambda: self.conn().post("/v1/ask", {"timeout_ms": 20000}))
        r = self.curl("http://expired.wild.test/", tunnel=True, timeout=15)
        self.assertEqual(r.connect_code, 403, r)
        self.assertIn("no allow came in the 1500 ms it was held", r.headers_text, r)
        self.assertEqual([x.get("hold") for x in self.records("expired.wild.test")],
                         [None, "expired"])

    def test_what_no_rule_could_allow_is_never_held(self):
        r = self.curl("http://10.0.0.1/", tunnel=True, timeout=5)
        self.assertEqual(r.connect_code, 403, r)
        self.assertEqual(self.held("10.0.0.1"), [])
        r = self.curl("http://allowed.test/", tunnel=True, timeout=5)
        self.assertEqual(r.connect_code, 200, r)

    def test_over_the_bound_is_refused_at_once_and_others_are_served(self):
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for i in range(4):
            s = self.topo.connect(self.topo.px, "127.0.0.1", self.proxy.port)
            s.sendall(b"CONNECT b%d.wild.test:80 HTTP/1.1\r\n\r\n" % i)
            socks.append(s)
        self.assertEqual(len(poll(self.pending, lambda p: len(p) >= 4)), 4)
        r = self.curl("http://over.wild.test/", tunnel=True, timeout=5)
        self.assertEqual(r.connect_code, 403, r)
        self.assertIn("ask-max-per-client", r.headers_text, r)
        r = self.curl("http://allowed.test/", tunnel=True, timeout=5)
        self.assertEqual((r.connect_code, r.http_code), (200, 200), r)
        # Clients that hang up leave the list.
        for s in socks:
            s.close()
        self.assertEqual(poll(self.pending, lambda p: not p), [])
        stats = self.conn().request("GET", "/v1/stats").json()
        self.assertGreaterEqual(stats["holds"]["gone"], 4, stats)
        self.assertEqual(stats["holds"]["held"],
                         sum(n for k, n in stats["holds"].items() if k != "held"), stats)


if __name__ == "__main__":
    base.main()
