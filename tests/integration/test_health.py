"""Health for an orchestrator (docs/fleet.md): liveness and readiness on a plain HTTP port of
their own, nothing else on it, slow or malformed clients answered without holding the others;
readiness fails while the upstream DNS does not answer and while draining; the appliance's
own log as one JSON object a line."""

import json
import re
import signal
import time

from tests.integration.harness import base
from tests.integration.harness.client import connect_tunnel
from tests.integration.harness.wait import LIVENESS_S, poll

HEALTH_RE = re.compile(r"listening health (\S+):(\d+)")


class HealthTest(base.TopologyCase):

    def health_proxy(self, **overrides):
        cfg = {"allow_http": ["allowed.test:443"], "health_listen": ["127.0.0.1:0"]}
        cfg.update(overrides)
        p = self.start_proxy(**cfg)
        m = poll(lambda: HEALTH_RE.search(p.stderr()), bool, timeout=LIVENESS_S)
        self.assertTrue(m, p.diag())
        return p, int(m.group(2))

    def ask(self, port, request, timeout=LIVENESS_S):
        """(status, headers text, body) of one raw request to the health port in px."""
        s = self.topo.connect(self.topo.px, "127.0.0.1", port, timeout=timeout)
        try:
            s.sendall(request.encode() if isinstance(request, str) else request)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
        return status, head.decode("latin-1"), body.decode()

    def get(self, port, path, method="GET"):
        return self.ask(port, "%s %s HTTP/1.1\r\nHost: x\r\n\r\n" % (method, path))

    def test_alive_and_ready_when_the_upstream_dns_answers(self):
        p, port = self.health_proxy()
        self.assertEqual(self.get(port, "/livez")[0], 200)
        status, head, body = poll(lambda: self.get(port, "/readyz"), lambda r: r[0] == 200,
                                  timeout=LIVENESS_S)
        self.assertEqual((status, body), (200, "ok\n"), head + body + p.diag())
        self.assertIn("Connection: close", head)
        status, head, body = self.get(port, "/readyz", method="HEAD")
        self.assertEqual((status, body), (200, ""))
        self.assertIn("Content-Length: 3", head)
        # Nothing else is on the port: not the proxy, not the control API.
        self.assertEqual(self.get(port, "/metrics")[0], 404)
        self.assertEqual(self.get(port, "/v1/rules")[0], 404)
        self.assertEqual(self.ask(port, "CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")[0], 404)
        self.assertEqual(self.get(port, "/livez", method="POST")[0], 405)
        self.assertEqual(self.ask(port, "nonsense\r\n\r\n")[0], 400)
        self.assertEqual(self.ask(port, b"\x16\x03\x01\x00\x05hello\r\n\r\n")[0], 400)

    def test_not_ready_while_no_upstream_dns_server_answers(self):
        # 203.0.113.99 is inside the test's own network namespace, and nothing answers there.
        p, port = self.health_proxy(upstream_dns=["203.0.113.99:53"])
        time.sleep(2.5)
        status, _, body = self.get(port, "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn("no upstream DNS server (203.0.113.99:53) answered", body)
        self.assertEqual(self.get(port, "/livez")[0], 200, "the process itself is alive")

    def test_slow_clients_do_not_hold_the_others(self):
        _, port = self.health_proxy()
        # More silent connections than the server serves at once (32): served one at a time,
        # each given 0.5 s, they would hold a prober for 20 s; served together, with the
        # oldest closed for the newest, not at all.
        silent = [self.topo.connect(self.topo.px, "127.0.0.1", port) for _ in range(40)]
        try:
            t0 = time.monotonic()
            status, _, _ = self.get(port, "/livez")
            took = time.monotonic() - t0
            self.assertEqual(status, 200)
            self.assertLess(took, 2.0, "a prober waited behind silent clients")
            # One that sends half a head and stops is closed after its 0.5 s, unanswered.
            half = self.topo.connect(self.topo.px, "127.0.0.1", port)
            half.sendall(b"GET /livez HTTP/1.1\r\n")
            half.settimeout(3)
            t0 = time.monotonic()
            self.assertEqual(half.recv(100), b"")
            self.assertLess(time.monotonic() - t0, 2.0)
            half.close()
            # A head larger than the bound is refused, not read for ever.
            self.assertEqual(self.ask(port, "GET /livez HTTP/1.1\r\nX: " + "a" * 5000 + "\r\n\r\n")[0],
                             400)
        finally:
            for s in silent:
                s.close()

    def test_readiness_fails_while_draining(self):
        p, port = self.health_proxy(drain_timeout_ms=4000)
        poll(lambda: self.get(port, "/readyz")[0], lambda s: s == 200, timeout=LIVENESS_S)
        conn, resp = connect_tunnel(self.topo, p.port, "allowed.test:443")
        self.addCleanup(conn.close)
        self.assertEqual(resp.status, 200, resp)
        p.proc.send_signal(signal.SIGTERM)
        status, _, body = poll(lambda: self.get(port, "/readyz"), lambda r: r[0] == 503,
                               timeout=LIVENESS_S)
        self.assertEqual(status, 503, body)
        self.assertIn("draining", body)
        self.assertEqual(self.get(port, "/livez")[0], 200, "draining is not dead")
        conn.close()
        p.wait_exit(LIVENESS_S)
        self.assertEqual(p.proc.returncode, 0, p.diag())

    def test_the_appliances_log_can_be_json_lines(self):
        p, _ = self.health_proxy(log_format="json")
        self.curl("http://nowhere.test/", proxy=p)
        p.proc.send_signal(signal.SIGHUP)
        poll(p.stderr, lambda err: "reopening" in err, timeout=LIVENESS_S)
        lines = [ln for ln in p.stderr().splitlines() if ln.strip()]
        self.assertGreater(len(lines), 3)
        msgs = []
        for ln in lines:
            obj = json.loads(ln)
            self.assertEqual(list(obj), ["ts", "level", "msg"], ln)
            self.assertRegex(obj["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            msgs.append(obj["msg"])
        self.assertTrue(any(m.startswith("listening proxy 127.0.0.1:") for m in msgs), msgs)
        self.assertTrue(any(m.startswith("ready:") for m in msgs), msgs)


if __name__ == "__main__":
    base.main()
