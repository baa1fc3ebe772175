"""Self-test of the topology and the fakes, with curl and no proxy.

If this fails, the proxy tests cannot be trusted: fix the harness first.
"""

import glob
import os
import re
import socket
import struct
import unittest

from tests.integration.harness import base, fake_dns, netns, tools
from tests.integration.harness.client import RawConn, bulk_transfer
from tests.integration.harness.fake_dns import A, AAAA, NOERROR, NXDOMAIN, SERVFAIL
from tests.integration.harness.wait import LIVENESS_S


class HarnessTest(base.TopologyCase):

    def query(self, name, qtype, tcp=False, edns=False):
        q = fake_dns.build_query(name, qtype, edns=edns)
        if tcp:
            s = self.topo.connect(self.topo.px, netns.DNS_ADDR, 53, timeout=2)
            try:
                s.sendall(struct.pack("!H", len(q)) + q)
                (n,) = struct.unpack("!H", fake_dns.recv_exact(s, 2))
                return fake_dns.parse_response(fake_dns.recv_exact(s, n))
            finally:
                s.close()
        s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.settimeout(2)
            s.sendto(q, (netns.DNS_ADDR, 53))
            return fake_dns.parse_response(s.recv(4096))
        finally:
            s.close()

    def addrs(self, resp):
        return sorted(t for _, t, _ in resp["answers"])

    def test_dns_zone(self):
        cases = [  # (name, type, rcode, addresses)
            ("allowed.test", A, NOERROR, ["198.51.100.10"]),
            ("ALLOWED.test", A, NOERROR, ["198.51.100.10"]),      # case-insensitive
            ("other.test", A, NOERROR, ["198.51.100.11"]),
            ("wild.test", A, NOERROR, ["198.51.100.12"]),
            ("www.wild.test", A, NOERROR, ["198.51.100.12"]),
            ("a.b.wild.test", A, NOERROR, ["198.51.100.12"]),
            ("rebind-private.test", A, NOERROR, ["10.0.0.1"]),
            ("rebind-loopback.test", A, NOERROR, ["127.0.0.1"]),
            ("rebind-mixed.test", A, NOERROR, ["10.0.0.1", "198.51.100.10"]),
            ("rebind-v6.test", AAAA, NOERROR, ["::1"]),
            ("rebind-v6.test", A, NOERROR, []),                   # NODATA
            ("mapped.test", AAAA, NOERROR, ["::ffff:a00:1"]),
            ("linklocal.test", A, NOERROR, ["169.254.169.254"]),
            ("v6.test", AAAA, NOERROR, ["2001:db8::10"]),
            ("allowed.test", AAAA, NOERROR, []),                  # NODATA
            ("dead.test", A, NOERROR, ["198.51.100.19"]),
            ("blackhole.test", A, NOERROR, ["198.51.100.250"]),
            ("nx.test", A, NXDOMAIN, []),
            ("servfail.test", A, SERVFAIL, []),
        ]
        for name, qtype, rcode, addrs in cases:
            with self.subTest(name=name, qtype=qtype):
                r = self.query(name, qtype, edns=True)
                self.assertEqual((r["rcode"], self.addrs(r)), (rcode, addrs))
                self.assertTrue(r["aa"])
                if rcode == NXDOMAIN or (rcode == NOERROR and not addrs):
                    self.assertEqual(r["nscount"], 1, "negative answers carry the SOA")

    def test_dns_tcp_and_counts(self):
        before = self.topo.dns_stats()
        r = self.query("allowed.test", A, tcp=True)
        self.assertEqual(self.addrs(r), ["198.51.100.10"])
        after = self.topo.dns_stats()
        self.assertEqual(after["tcp"], before["tcp"] + 1)
        self.assertEqual(after["total"], before["total"] + 1)

    def test_dns_flip_alternates(self):
        seen = [self.addrs(self.query("flip.test", A))[0] for _ in range(4)]
        self.assertEqual(len(set(seen)), 2, seen)
        self.assertNotEqual(seen[0], seen[1])
        self.assertEqual(seen[0], seen[2])
        self.assertIn("10.0.0.1", seen)

    def test_dns_drop_is_silent(self):
        with self.assertRaises(socket.timeout):
            s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.settimeout(0.3)
                s.sendto(fake_dns.build_query("drop.test", A), (netns.DNS_ADDR, 53))
                s.recv(4096)
            finally:
                s.close()

    def test_http_echo_keepalive_and_chunked(self):
        r = base.curl(self.topo, ["-H", "X-Test: 1", "http://198.51.100.10/a?b=c",
                                  "http://198.51.100.10:8080/second"])
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([t[0] for t in r.transfers], [200, 200], r)
        self.assertEqual(sum(t[2] for t in r.transfers), 2, r)   # port 80 and port 8080
        with RawConn(self.topo, 80, host="198.51.100.11") as c:
            one = c.request("GET /one HTTP/1.1\r\nHost: other.test\r\nX-A: b\r\n\r\n").json()
            two = c.request("POST /two HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").json()
        self.assertEqual((one["method"], one["target"], one["host"]), ("GET", "/one", "other.test"))
        self.assertIn(["X-A", "b"], one["headers"])
        self.assertEqual(two["body_length"], 11)
        self.assertEqual(two["request_on_conn"], 2)
        self.assertEqual(two["local"], "198.51.100.11:80")

    def test_every_http_port_and_address(self):
        addrs = netns.UPSTREAM_V4 + ([netns.UPSTREAM_V6] if self.topo.ipv6 else [])
        for a in addrs:
            for port in netns.HTTP_PORTS:
                host = "[%s]" % a if ":" in a else a
                r = base.curl(self.topo, ["http://%s:%d/" % (host, port)], timeout=5)
                self.assertEqual((r.rc, r.http_code), (0, 200), (a, port, r))

    def test_echo_and_half_close(self):
        with RawConn(self.topo, 443, host="198.51.100.10") as c:
            c.send(b"ping\x00\xff")
            self.assertEqual(c.recv_exact(6), b"ping\x00\xff")
            c.sock.shutdown(socket.SHUT_WR)
            self.assertEqual(c.read_to_eof(timeout=3), b"")

    def test_bulk(self):
        for until_eof in (False, True):
            s = self.topo.connect(self.topo.px, "198.51.100.10", netns.BULK_PORT)
            try:
                res = bulk_transfer(s, 3 << 20, 2 << 20 | 12345, seed=7, until_eof=until_eof)
            finally:
                s.close()
            self.assertTrue(res["ok"], res)

    def test_dead_and_blackhole(self):
        r = base.curl(self.topo, ["http://198.51.100.19/"], timeout=3)
        self.assertEqual(r.rc, 7, r)          # connection refused
        # curl's own connect timeout ends it (rc 28, no ICMP); the overall one is only a bound
        r = base.curl(self.topo, ["--connect-timeout", "0.5", "http://198.51.100.250/"], timeout=LIVENESS_S)
        self.assertEqual(r.rc, 28, r)         # timed out, no ICMP

    def test_canaries_log_connections(self):
        before = len(self.topo.canary_hits())
        for url in ("http://10.0.0.1/", "http://169.254.169.254:8080/", "http://127.0.0.1/"):
            r = base.curl(self.topo, [url], timeout=3)
            self.assertEqual(r.http_code, 200, (url, r))
        hits = self.topo.canary_hits()[before:]
        self.assertEqual(sorted(h["local"] for h in hits),
                         ["10.0.0.1:80", "127.0.0.1:80", "169.254.169.254:8080"])

    def test_ipv6(self):
        if not self.topo.ipv6:
            self.skipTest("IPv6 unavailable in the topology")
        r = base.curl(self.topo, ["http://[2001:db8::10]/"], timeout=3)
        self.assertEqual((r.rc, r.http_code), (0, 200), r)
        self.assertEqual(r.json()["local"], "[2001:db8::10]:80")


class ToolsTest(unittest.TestCase):
    """Every external command the suite and the benchmarks run is declared in scripts/deps.txt,
    and every command of the groups scripts/test.sh installs is there."""

    # argv lists that start with a literal command: ["curl", ...], run(ns, ["dig", ...])
    ARGV = re.compile(r'(?:\bargv(?:_prefix)?\s*=|\b(?:run|popen|Popen|check_output)\((?:[^()\[]*?,)?)\s*'
                      r'\[\s*"([A-Za-z0-9_.+-]+)"')
    # sh("docker", ...) and need("busybox") in the e2e harness
    CALL = re.compile(r'\b(?:sh|need)\(\s*"([A-Za-z0-9_.+-]+)"')
    BUILT = {"vibepit", "vibepit-proxy", "vibepit-bench", "vibepit-microbench"}

    def test_every_called_command_is_declared(self):
        table = tools.providers()
        sources = glob.glob(os.path.join(base.REPO, "tests", "integration", "*.py"))
        sources += glob.glob(os.path.join(base.REPO, "tests", "integration", "harness", "*.py"))
        sources += glob.glob(os.path.join(base.REPO, "tests", "e2e", "*.py"))
        sources += glob.glob(os.path.join(base.REPO, "tests", "deploy", "*.py"))
        sources += glob.glob(os.path.join(base.REPO, "bench", "**", "*.py"), recursive=True)
        seen = {}
        for path in sources:
            with open(path) as f:
                text = f.read()
            calls = self.CALL.findall(text) if os.sep + "e2e" + os.sep in path else []
            for command in self.ARGV.findall(text) + calls:
                seen.setdefault(command, os.path.relpath(path, base.REPO))
        for known in ("curl", "dig", "openssl", "ip", "prlimit", "squid", "dnsperf", "docker",
                      "setpriv", "busybox"):
            self.assertIn(known, seen, "the scan no longer finds %s: fix the pattern" % known)
        undeclared = {c: where for c, where in seen.items() if c not in table and c not in self.BUILT}
        if undeclared:
            self.fail("undeclared commands, add them to scripts/deps.txt: " + ", ".join(
                "%s (run by %s)" % item for item in sorted(undeclared.items())))

    def test_test_group_commands_are_installed(self):
        table = tools.providers()
        absent = [tools.missing_message(c, table) for c, (_, group) in sorted(table.items())
                  if group in ("build", "test") and tools.shutil.which(c) is None]
        self.assertEqual(absent, [])

    def test_missing_command_names_its_package(self):
        table = {"openssl": ("openssl", "test"), "squid": ("squid", "bench")}
        self.assertEqual(tools.missing_message("openssl", table),
                         "`openssl` is not installed: it comes from the Debian package openssl, "
                         "which scripts/install-deps.sh --test installs")
        self.assertIn("install-deps.sh --bench", tools.missing_message("squid", table))
        self.assertIn("scripts/deps.txt names no Debian package",
                      tools.missing_message("openssl", {}))
        with self.assertRaises(tools.MissingTool) as cm:
            tools.need("vibepit-no-such-command")
        self.assertIn("names no Debian package", str(cm.exception))


if __name__ == "__main__":
    base.main(needs_proxy=False)
