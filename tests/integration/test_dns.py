#!/usr/bin/env python3
"""The DNS server inside vibepit-proxy, with the real dig as client: the allowlist,
answers checked for blocked addresses (A, AAAA, CNAME chains, HTTPS hints), query
types, upstream failure, truncation, the cache, the per-client rate limit, malformed
input over UDP and TCP, and one decision record per answered query."""

import datetime
import ipaddress
import random
import re
import socket
import struct
import time

from harness import base, fake_dns, netns
from harness.fake_dns import A, AXFR, IXFR, build_query, encode_name

RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
REASONS = {"allowlisted", "not_allowlisted", "blocked_address", "resolve_failed", "invalid_target",
           "rate_limited", "overloaded"}
RECORD_KEYS = ("id", "ts", "src", "event", "client", "qname", "qtype", "rcode", "addrs", "cached",
               "verdict", "reason", "gen", "transport")
DENY_REASONS = {"not_allowlisted", "blocked_address", "rate_limited"}   # always verdict deny
CLIENT_RE = re.compile(r"^(127\.0\.0\.1|\[::1\]):\d+$")

ALLOW_DNS = ["allowed.test", "dual.test", "v6.test", "*.wild.test", "rebind-private.test",
             "rebind-loopback.test", "rebind-v6.test", "mapped.test", "https-ok.test",
             "https-private.test", "https-v6private.test", "txt.test", "mx.test"]


# ------------------------------------------------------------------ dig

class DigResult:
    """dig's answer, parsed from its default output."""

    HEADER_RE = re.compile(r";; ->>HEADER<<- opcode: (\w+), status: (\w+), id: (\d+)")
    FLAGS_RE = re.compile(r";; flags:([^;]*);")

    def __init__(self, argv, proc, elapsed):
        self.argv = argv
        self.rc = proc.returncode
        self.text = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        self.elapsed = elapsed
        self.status = self.opcode = self.id = None
        self.flags = set()
        self.answers = []        # [(name, ttl, type, data)]
        m = self.HEADER_RE.search(self.text)
        if m:
            self.opcode, self.status, self.id = m.group(1), m.group(2), int(m.group(3))
        m = self.FLAGS_RE.search(self.text)
        if m:
            self.flags = set(m.group(1).split())
        section = None
        for line in self.text.splitlines():
            if line.startswith(";; ") and line.endswith("SECTION:"):
                section = line[3:-len(" SECTION:")]
                continue
            if not line.strip():
                section = None
                continue
            if section == "ANSWER" and not line.startswith(";"):
                parts = line.split(None, 4)
                if len(parts) == 5:
                    self.answers.append((parts[0], int(parts[1]), parts[3], parts[4]))

    def data(self, rtype):
        return [d for _, _, t, d in self.answers if t == rtype]

    def addresses(self):
        """A and AAAA answers as ipaddress objects."""
        return [ipaddress.ip_address(d) for _, _, t, d in self.answers if t in ("A", "AAAA")]

    def __repr__(self):
        return "<dig %s rc=%s status=%s flags=%s>\n%s" % (
            " ".join(self.argv[1:]), self.rc, self.status, sorted(self.flags), self.text[-2500:])


def free_port(topo, host):
    """A port free for both UDP and TCP on host inside px (dig binds it with -b)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    def pick():
        for _ in range(20):
            t = socket.socket(family, socket.SOCK_STREAM)
            u = socket.socket(family, socket.SOCK_DGRAM)
            try:
                t.bind((host, 0))
                port = t.getsockname()[1]
                try:
                    u.bind((host, port))
                except OSError:
                    continue
                return port
            finally:
                t.close()
                u.close()
        raise RuntimeError("no free port for dig")
    return netns.in_netns(topo.px, pick)


def dig(topo, host, port, name, qtype="A", tcp=False, opts=(), timeout=2, source_port=None):
    """Run dig inside px. UDP answers with TC are shown as they are (+ignore), not retried.
    With source_port, dig sends from host:source_port (-b), which names it in decision records."""
    argv = ["dig", "-r", "@" + host, "-p", str(port), name, qtype, "+tries=1", "+time=%d" % timeout]
    if source_port is not None:
        src_host = "::1" if ":" in host else "127.0.0.1"
        argv += ["-b", "%s#%d" % (src_host, source_port)]
    argv += ["+tcp"] if tcp else ["+notcp", "+ignore"]      # dig 9.18 asks ANY over TCP unless +notcp
    argv += list(opts)
    t0 = time.monotonic()
    proc = topo.run(topo.px, argv, timeout=timeout + 10)
    return DigResult(argv, proc, time.monotonic() - t0)


# ------------------------------------------------------------------ raw messages

def header(qid, flags=0x0100, qd=1, an=0, ns=0, ar=0):
    return struct.pack("!HHHHHH", qid, flags, qd, an, ns, ar)


def question(name, qtype=A):
    return encode_name(name) + struct.pack("!HH", qtype, 1)


def reply_head(msg):
    """(id, qr, opcode, tc, rcode) of a reply."""
    qid, flags = struct.unpack("!HH", msg[:4])
    return qid, bool(flags & 0x8000), (flags >> 11) & 0xF, bool(flags & 0x0200), flags & 0xF


def same_addr(a, b):
    return ipaddress.ip_address(a) == ipaddress.ip_address(b)


# ------------------------------------------------------------------ base class

class DnsCase(base.TopologyCase):
    """A TopologyCase whose proxies run the DNS server, with dig and raw-socket helpers."""

    def tearDown(self):
        super().tearDown()
        # the proxy stays up and its sanitizers stay silent (per-test proxies are checked at cleanup)
        p = type(self).proxy
        if p is not None:
            self.assertTrue(p.alive(), "class proxy not running after %s%s" % (self.id(), p.diag()))
            report = p.sanitizer_report()
            if report and not getattr(p, "_reported", False):
                p._reported = True
                self.fail("sanitizer report in the proxy's stderr:\n%s" % report)

    def dns_proxy(self, **overrides):
        """A per-test proxy with a DNS listener; SIGTERM, exit 0 and no sanitizer report at cleanup."""
        overrides.setdefault("dns_listen", ["127.0.0.1:0"])
        overrides.setdefault("dns_tcp_idle_ms", 1000)
        p = self.start_proxy(**overrides)
        # cleanups run last-in first: this one sees the proxy before its SIGTERM
        self.addCleanup(lambda: self.assertTrue(p.alive(), "proxy died during the test (status %s)%s"
                                                % (p.proc.returncode, p.diag())))
        self.assertIsNotNone(p.dns_port, "no 'listening dns' line%s" % p.diag())
        return p

    # ---------------------------------------------------------- dig with record checks

    def dig(self, name, qtype="A", proxy=None, tcp=False, opts=(), timeout=2, listener=None,
            source_port=None):
        p = proxy or self.proxy
        host, port = listener or (p.dns_host, p.dns_port)
        return dig(self.topo, host, port, name, qtype, tcp=tcp, opts=opts, timeout=timeout,
                   source_port=source_port)

    def query(self, name, qtype="A", status="NOERROR", proxy=None, tcp=False, opts=(), reason=None,
              timeout=2, listener=None):
        """dig a name, check the rcode, then find and check its decision record.

        status may be a set of acceptable statuses. Returns (DigResult, record)."""
        p = proxy or self.proxy
        host = (listener or (p.dns_host, p.dns_port))[0]
        sport = free_port(self.topo, host)
        client = ("[::1]:%d" if ":" in host else "127.0.0.1:%d") % sport
        sent = datetime.datetime.now(datetime.timezone.utc)
        r = self.dig(name, qtype, proxy=p, tcp=tcp, opts=opts, timeout=timeout, listener=listener,
                     source_port=sport)
        wanted = {status} if isinstance(status, str) else set(status)
        self.assertIn(r.status, wanted, "%r%s" % (r, p.diag()))
        # The client port alone is not unique: an earlier raw socket may have had it.
        recs = p.wait_dns_records(lambda rec: rec.get("client") == client and
                                  record_time(rec) >= sent, timeout=3.0)
        self.assertEqual(len(recs), 1, "want one decision record from %s (%s %s): %s%s"
                         % (client, name, qtype, recs, p.diag()))
        match = recs[0]
        self.assertEqual(str(match.get("qname", "")).lower().rstrip("."), name.lower().rstrip("."), match)
        self.assertEqual(match.get("qtype"), qtype, match)
        self.check_record(match, r.status, "tcp" if tcp else "udp", reason)
        return r, match

    def check_record(self, rec, rcode, transport, reason=None):
        missing = [k for k in RECORD_KEYS if k not in rec]
        self.assertEqual(missing, [], "record lacks fields: %s" % rec)
        self.assertEqual(rec["src"], "dns", rec)
        self.assertEqual(rec["event"], "decision", rec)
        self.assertRegex(rec["client"], CLIENT_RE)
        self.assertEqual(rec["rcode"], rcode, rec)
        self.assertEqual(rec["transport"], transport, rec)
        self.assertIn(rec["reason"], REASONS, rec)
        self.assertIn(rec["verdict"], ("allow", "deny"), rec)
        if rec["reason"] == "allowlisted":
            self.assertEqual(rec["verdict"], "allow", rec)
        if rec["reason"] in DENY_REASONS:   # audit mode lets not_allowlisted through, marked
            self.assertEqual(rec["verdict"], "allow" if rec.get("would_deny") else "deny", rec)
        self.assertIsInstance(rec["id"], int, rec)
        self.assertIsInstance(rec["ts"], str, rec)
        self.assertIsInstance(rec["gen"], int, rec)
        self.assertIsInstance(rec["cached"], bool, rec)
        self.assertIsInstance(rec["addrs"], list, rec)
        if reason is not None:
            self.assertEqual(rec["reason"], reason, rec)

    def assertAnswered(self, r, rtype, expected):
        got = sorted(r.data(rtype))
        self.assertEqual(got, sorted(expected), r)

    def assertBlocked(self, r, rec, cidr, addr, status="REFUSED"):
        self.assertEqual(r.status, status, r)
        self.assertEqual(r.answers, [], "a refused answer must carry no records: %r" % r)
        self.assertEqual(rec["reason"], "blocked_address", rec)
        self.assertEqual(rec["verdict"], "deny", rec)
        self.assertEqual(rec.get("range"), cidr, rec)
        self.assertTrue(any(same_addr(a, addr) for a in rec["addrs"]), "%s not in addrs: %s" % (addr, rec))

    # ---------------------------------------------------------- raw sockets

    def udp_exchange(self, payload, proxy=None, timeout=1.0):
        """Send one datagram to the DNS listener; the reply, or None after `timeout`."""
        p = proxy or self.proxy
        s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.settimeout(timeout)
            s.sendto(payload, (p.dns_host, p.dns_port))
            try:
                return s.recv(65535)
            except socket.timeout:
                return None
        finally:
            s.close()

    def tcp_connect(self, proxy=None, timeout=5.0):
        p = proxy or self.proxy
        s = self.topo.connect(self.topo.px, p.dns_host, p.dns_port, timeout=timeout)
        self.addCleanup(s.close)
        return s

    @staticmethod
    def tcp_read_message(s):
        head = fake_dns.recv_exact(s, 2)
        if head is None:
            return None
        (n,) = struct.unpack("!H", head)
        return fake_dns.recv_exact(s, n)

    def tcp_exchange(self, payload, proxy=None, timeout=3.0):
        s = self.tcp_connect(proxy, timeout=timeout)
        s.sendall(struct.pack("!H", len(payload)) + payload)
        return self.tcp_read_message(s)

    def wait_eof(self, s, limit):
        """Seconds until the peer closes s (EOF or RST), or None if it stays open for `limit`.
        Data that arrives first is returned too: (seconds, data)."""
        t0 = time.monotonic()
        got = b""
        while time.monotonic() - t0 < limit:
            s.settimeout(max(0.05, limit - (time.monotonic() - t0)))
            try:
                chunk = s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                return time.monotonic() - t0, got
            except socket.timeout:
                break
            if not chunk:
                return time.monotonic() - t0, got
            got += chunk
        return None, got

    def assertServing(self, proxy=None, tcp=False):
        """The next good query is answered."""
        r, _ = self.query("allowed.test", proxy=proxy, tcp=tcp)
        self.assertEqual(r.data("A"), ["198.51.100.10"], r)


def record_time(rec):
    """A decision record's ts as an aware UTC datetime."""
    return datetime.datetime.strptime(rec["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc)


# ------------------------------------------------------------------ tests

class DnsTest(DnsCase):
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "allow_dns": ALLOW_DNS, "dns_tcp_idle_ms": 1000}

    # ---------------------------------------------------------- allowlist

    def test_allowed_names_answer_over_udp_and_tcp(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("allowed.test", "A", tcp=tcp, reason="allowlisted")
                self.assertAnswered(r, "A", ["198.51.100.10"])
                self.assertIn("qr", r.flags, r)
                self.assertTrue(any(same_addr(a, "198.51.100.10") for a in rec["addrs"]), rec)
                r, rec = self.query("v6.test", "AAAA", tcp=tcp, reason="allowlisted")
                self.assertEqual(r.addresses(), [ipaddress.ip_address("2001:db8::10")], r)
                self.assertTrue(any(same_addr(a, "2001:db8::10") for a in rec["addrs"]), rec)
                r, _ = self.query("dual.test", "A", tcp=tcp)
                self.assertAnswered(r, "A", ["198.51.100.10"])
                r, _ = self.query("dual.test", "AAAA", tcp=tcp)
                self.assertEqual(r.addresses(), [ipaddress.ip_address("2001:db8::10")], r)
        self.assertGreaterEqual(self.topo.dns_count("allowed.test/A"), 1)

    def test_allowed_name_without_records_is_nodata(self):
        r, rec = self.query("allowed.test", "AAAA", reason="allowlisted")
        self.assertEqual(r.answers, [], r)

    def test_denied_name_refused_and_not_forwarded(self):
        for tcp in (False, True):
            for name in ("other.test", "never-allowed.test"):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, "A", status="REFUSED", tcp=tcp, reason="not_allowlisted")
                    self.assertEqual(r.answers, [], r)
                    self.assertEqual(rec["verdict"], "deny", rec)
                    self.assertEqual(rec["addrs"], [], rec)
        self.assertEqual(self.topo.dns_count("other.test/A"), 0, self.topo.dns_stats())
        self.assertEqual(self.topo.dns_count("never-allowed.test/A"), 0, self.topo.dns_stats())

    def test_deny_rcode_nxdomain(self):
        p = self.dns_proxy(allow_dns=["allowed.test", "rebind-private.test"], dns_deny_rcode="NXDOMAIN")
        r, rec = self.query("third.test", "A", status="NXDOMAIN", proxy=p, reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        r, rec = self.query("rebind-private.test", "A", status="NXDOMAIN", proxy=p)
        self.assertBlocked(r, rec, "10.0.0.0/8", "10.0.0.1", status="NXDOMAIN")
        r, _ = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.10"])
        self.assertEqual(self.topo.dns_count("third.test/A"), 0, self.topo.dns_stats())

    def test_wildcard_any_depth_but_not_apex(self):
        for name in ("www.wild.test", "a.b.wild.test"):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, _ = self.query(name, "A", tcp=tcp, reason="allowlisted")
                    self.assertAnswered(r, "A", ["198.51.100.12"])
        r, rec = self.query("wild.test", "A", status="REFUSED", reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("wild.test/A"), 0, self.topo.dns_stats())

    def test_exact_name_does_not_allow_subdomains(self):
        r, _ = self.query("x.allowed.test", "A", status="REFUSED", reason="not_allowlisted")
        self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("x.allowed.test/A"), 0, self.topo.dns_stats())

    def test_mixed_case_and_trailing_dot_match(self):
        for name, addr in (("AlLoWeD.TeSt.", "198.51.100.10"), ("ALLOWED.TEST", "198.51.100.10"),
                           ("WwW.WiLd.TeSt.", "198.51.100.12")):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, _ = self.query(name, "A", tcp=tcp, reason="allowlisted")
                    self.assertAnswered(r, "A", [addr])

    # ---------------------------------------------------------- answers with blocked addresses

    def test_rebinding_answers_refused(self):
        cases = [  # (name, type, range, address in the answer)
            ("rebind-private.test", "A", "10.0.0.0/8", "10.0.0.1"),
            ("rebind-loopback.test", "A", "127.0.0.0/8", "127.0.0.1"),
            ("rebind-v6.test", "AAAA", "::1/128", "::1"),
            ("mapped.test", "AAAA", "10.0.0.0/8", "::ffff:10.0.0.1"),   # judged as 10.0.0.1
        ]
        for name, qtype, cidr, addr in cases:
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, qtype, status="REFUSED", tcp=tcp)
                    self.assertBlocked(r, rec, cidr, addr)

    def test_https_hints_checked(self):
        r, rec = self.query("https-ok.test", "HTTPS", reason="allowlisted")
        [data] = r.data("HTTPS")
        self.assertIn("ipv4hint=198.51.100.10", data, r)
        self.assertIn("ipv6hint=2001:db8::10", data, r)
        self.assertIn('alpn="h2"', data, r)
        for name, cidr, addr in (("https-private.test", "10.0.0.0/8", "10.0.0.1"),
                                 ("https-v6private.test", "::1/128", "::1")):
            for tcp in (False, True):
                with self.subTest(name=name, tcp=tcp):
                    r, rec = self.query(name, "HTTPS", status="REFUSED", tcp=tcp)
                    self.assertBlocked(r, rec, cidr, addr)

    # ---------------------------------------------------------- query types

    def test_txt_and_mx_allowed_by_default(self):
        r, _ = self.query("txt.test", "TXT", reason="allowlisted")
        self.assertEqual(r.data("TXT"), ['"hello"'], r)
        r, _ = self.query("mx.test", "MX", tcp=True, reason="allowlisted")
        self.assertEqual(r.data("MX"), ["10 allowed.test."], r)

    def test_qtypes_restricted(self):
        p = self.dns_proxy(allow_dns=["txt.test", "allowed.test"], dns_qtypes=["A"])
        before = self.topo.dns_stats()["queries"]
        for name, qtype in (("txt.test", "TXT"), ("allowed.test", "AAAA"), ("allowed.test", "MX")):
            with self.subTest(name=name, qtype=qtype):
                r, rec = self.query(name, qtype, status="REFUSED", proxy=p)
                self.assertEqual(r.answers, [], r)
                self.assertEqual(rec["verdict"], "deny", rec)
        after = self.topo.dns_stats()["queries"]
        for key in ("txt.test/TXT", "allowed.test/AAAA", "allowed.test/MX"):
            self.assertEqual(after.get(key, 0), before.get(key, 0), "%s was forwarded" % key)
        r, _ = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.10"])

    def test_any_gets_rfc8482_answer_and_is_not_forwarded(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("allowed.test", "ANY", status={"NOERROR", "REFUSED"}, tcp=tcp)
                if r.status == "NOERROR":
                    self.assertEqual([t for _, _, t, _ in r.answers], ["HINFO"], r)
                    self.assertIn("RFC8482", r.data("HINFO")[0], r)
                else:
                    self.assertEqual(r.answers, [], r)
        self.assertEqual(self.topo.dns_count("allowed.test/ANY"), 0, self.topo.dns_stats())

    def test_zone_transfer_not_served(self):
        for qtype in (AXFR, IXFR):
            for tcp in (False, True):
                with self.subTest(qtype=qtype, tcp=tcp):
                    q = build_query("allowed.test", qtype, qid=0x4242 + qtype)
                    msg = self.tcp_exchange(q) if tcp else self.udp_exchange(q, timeout=2.0)
                    self.assertIsNotNone(msg, "no answer to a zone transfer request%s" % self.diag())
                    qid, qr, _, _, rcode = reply_head(msg)
                    self.assertEqual((qid, qr), (0x4242 + qtype, True))
                    # an IXFR without the client's SOA is malformed as well
                    accept = (NOTIMP, REFUSED) if qtype == AXFR else (NOTIMP, REFUSED, FORMERR)
                    self.assertIn(rcode, accept, RCODE_NAMES.get(rcode, rcode))
        stats = self.topo.dns_stats()["queries"]
        self.assertEqual(stats.get("allowed.test/AXFR", 0) + stats.get("allowed.test/IXFR", 0), 0, stats)
        self.assertServing()

    # ---------------------------------------------------------- upstream failure

    def test_upstream_down_servfail_within_timeout(self):
        # nothing listens on 203.0.113.2:5399
        p = self.dns_proxy(allow_dns=["allowed.test"], upstream_dns=["203.0.113.2:5399"],
                           dns_timeout_ms=1000)
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("allowed.test", "A", status="SERVFAIL", proxy=p, tcp=tcp, timeout=6,
                                    reason="resolve_failed")
                self.assertLess(r.elapsed, 5.0, r)
                self.assertEqual(r.answers, [], r)
        self.assertTrue(p.alive())

    def test_upstream_servfail_passed_on(self):
        p = self.dns_proxy(allow_dns=["servfail.test"])
        r, _ = self.query("servfail.test", "A", status="SERVFAIL", proxy=p)
        self.assertEqual(r.answers, [], r)

    # ---------------------------------------------------------- truncation

    def test_truncated_over_udp_whole_over_tcp(self):
        p = self.dns_proxy(allow_dns=["big.test"], dns_cache_entries=0)
        r, _ = self.query("big.test", "A", proxy=p, opts=["+noedns"], reason="allowlisted")
        self.assertIn("tc", r.flags, "a 40-record answer does not fit 512 bytes: %r" % r)
        before = self.topo.dns_stats()
        r, _ = self.query("big.test", "A", proxy=p, tcp=True, reason="allowlisted")
        self.assertNotIn("tc", r.flags, r)
        self.assertEqual(sorted(r.addresses()),
                         sorted(ipaddress.ip_address("198.51.100.%d" % i) for i in range(100, 140)), r)
        after = self.topo.dns_stats()
        self.assertGreater(after["tcp"], before["tcp"], "the TCP client's query went upstream over UDP")
        self.assertGreater(after["queries"].get("big.test/A", 0), before["queries"].get("big.test/A", 0))

    # ---------------------------------------------------------- cache

    def test_cache_answers_second_query(self):
        p = self.dns_proxy(allow_dns=["allowed.test"])
        before = self.topo.dns_count("allowed.test/A")
        r1, rec1 = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        time.sleep(1.1)   # TTLs count down in whole seconds
        r2, rec2 = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 1, "second query went upstream")
        self.assertIs(rec1["cached"], False, rec1)
        self.assertIs(rec2["cached"], True, rec2)
        self.assertAnswered(r2, "A", ["198.51.100.10"])
        self.assertLessEqual(r2.answers[0][1], r1.answers[0][1], (r1, r2))
        self.assertLessEqual(r1.answers[0][1], 30, r1)
        # the cache serves TCP clients too
        r3, rec3 = self.query("allowed.test", "A", proxy=p, tcp=True, reason="allowlisted")
        self.assertAnswered(r3, "A", ["198.51.100.10"])
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 1)

    def test_cache_entry_expires(self):
        p = self.dns_proxy(allow_dns=["short.test"], dns_cache_min_ttl=0)
        before = self.topo.dns_count("short.test/A")
        r, rec = self.query("short.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.14"])
        self.assertLessEqual(r.answers[0][1], 1, r)
        time.sleep(2.2)
        r, rec = self.query("short.test", "A", proxy=p, reason="allowlisted")
        self.assertAnswered(r, "A", ["198.51.100.14"])
        self.assertIs(rec["cached"], False, rec)
        self.assertEqual(self.topo.dns_count("short.test/A") - before, 2, "expired entry served")

    def test_cache_disabled(self):
        p = self.dns_proxy(allow_dns=["allowed.test"], dns_cache_entries=0)
        before = self.topo.dns_count("allowed.test/A")
        for _ in range(3):
            _, rec = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
            self.assertIs(rec["cached"], False, rec)
        self.assertEqual(self.topo.dns_count("allowed.test/A") - before, 3)

    # ---------------------------------------------------------- rate limit

    def test_client_rate_limit(self):
        qps, burst, n = 20, 20, 200
        p = self.dns_proxy(allow_dns=["allowed.test"], dns_client_qps=qps, dns_client_burst=burst)
        self.assertServing(proxy=p)      # fills the cache: the burst is not held up upstream
        time.sleep(burst / qps + 0.2)    # the bucket is full again
        s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        dest = (p.dns_host, p.dns_port)
        t0 = time.monotonic()
        sent = 0
        while sent < n and time.monotonic() - t0 < 3.0:
            try:
                s.sendto(build_query("allowed.test", A, qid=sent + 1), dest)
                sent += 1
            except OSError:
                time.sleep(0.001)
        rcodes, last = {}, t0
        deadline = time.monotonic() + 3.0
        s.settimeout(0.2)
        while len(rcodes) < sent and time.monotonic() < deadline:
            try:
                msg = s.recv(4096)
            except socket.timeout:
                if time.monotonic() - last > 1.0:
                    break
                continue
            last = time.monotonic()
            qid, qr, _, _, rcode = reply_head(msg)
            self.assertTrue(qr)
            rcodes[qid] = rcode
        elapsed = last - t0
        counts = {RCODE_NAMES.get(c, c): list(rcodes.values()).count(c) for c in set(rcodes.values())}
        ok = counts.get("NOERROR", 0)
        refused = counts.get("REFUSED", 0)
        limit = burst + qps * elapsed + 5
        self.assertLessEqual(ok, limit, "%s answers in %.2fs: %s" % (sent, elapsed, counts))
        self.assertGreaterEqual(ok, burst // 2, counts)
        self.assertEqual(ok + refused, len(rcodes), "only NOERROR or REFUSED expected: %s" % counts)
        self.assertGreaterEqual(refused, 50, counts)
        limited = p.wait_dns_records(lambda r: r.get("reason") == "rate_limited")
        self.assertTrue(limited, "no rate_limited record%s" % p.diag())
        self.check_record(limited[0], "REFUSED", "udp", "rate_limited")
        time.sleep(1.5)
        self.assertServing(proxy=p)

    # ---------------------------------------------------------- malformed input

    def test_malformed_udp(self):
        rng = random.Random(20240611)
        good = question("allowed.test")
        cases = [  # (label, payload, acceptable rcodes; None = no reply)
            ("empty datagram", b"", {None, FORMERR}),
            ("5 bytes", b"\x12\x34\x01\x00\x00", {None, FORMERR}),
            ("header only, QDCOUNT 1", header(0x1001), {FORMERR}),
            ("QDCOUNT 2", header(0x1002, qd=2) + good + question("other.test"), {FORMERR}),
            ("QR set", header(0x1003, flags=0x8100) + good, {None}),
            ("opcode STATUS", header(0x1004, flags=(2 << 11) | 0x0100) + good, {NOTIMP}),
            ("pointer loop", header(0x1005) + b"\xc0\x0c" + struct.pack("!HH", A, 1), {None, FORMERR}),
            ("pointer past the end", header(0x1006) + b"\xc0\xff" + struct.pack("!HH", A, 1), {FORMERR}),
            ("label length 64", header(0x1007) + b"\x40" + b"a" * 64 + b"\x04test\x00"
             + struct.pack("!HH", A, 1), {FORMERR}),
            ("truncated OPT", header(0x1008, ar=1) + good + b"\x00\x00\x29\x04", {FORMERR}),
            ("question cut short", header(0x1009) + encode_name("allowed.test") + b"\x00", {FORMERR}),
            ("1500 random bytes", rng.randbytes(1500), {None, FORMERR, NOTIMP, REFUSED}),
            ("random after a header", header(0x100a) + rng.randbytes(300), {None, FORMERR, REFUSED}),
        ]
        formerr = 0
        for label, payload, accept in cases:
            with self.subTest(case=label):
                expect_reply = None not in accept
                msg = self.udp_exchange(payload, timeout=2.0 if expect_reply else 0.5)
                if msg is None:
                    self.assertIn(None, accept, "no reply to %s%s" % (label, self.diag()))
                else:
                    self.assertGreaterEqual(len(msg), 12, msg)
                    qid, qr, _, _, rcode = reply_head(msg)
                    self.assertTrue(qr, msg)
                    self.assertIn(rcode, accept, "%s: got %s" % (label, RCODE_NAMES.get(rcode, rcode)))
                    if len(payload) >= 2:
                        self.assertEqual(qid, struct.unpack("!H", payload[:2])[0])
                    formerr += rcode == FORMERR
                self.assertTrue(self.proxy.alive(), "proxy died on %s%s" % (label, self.diag()))
                self.assertServing()
        recs = self.proxy.wait_dns_records(lambda r: r.get("reason") == "invalid_target", count=formerr)
        self.assertGreaterEqual(len(recs), formerr, self.diag())
        for rec in recs:
            self.assertEqual(rec["verdict"], "deny", rec)

    def test_malformed_tcp(self):
        # a zero length prefix: no message to answer; the connection is closed
        s = self.tcp_connect()
        s.sendall(b"\x00\x00")
        took, data = self.wait_eof(s, 3.0)
        self.assertIsNotNone(took, "connection left open after a zero-length message%s" % self.diag())
        self.assertServing(tcp=True)
        # a length prefix promising more than is sent, then close
        s = self.tcp_connect()
        s.sendall(b"\x01\x00" + header(0x2001) + b"\x07allowed")
        s.close()
        time.sleep(0.1)
        self.assertServing(tcp=True)
        # a complete but malformed message gets FORMERR over TCP
        msg = self.tcp_exchange(header(0x2002, qd=2) + question("allowed.test") + question("other.test"))
        self.assertIsNotNone(msg, "no answer%s" % self.diag())
        qid, qr, _, _, rcode = reply_head(msg)
        self.assertEqual((qid, qr, rcode), (0x2002, True, FORMERR))
        # a response sent to the server over TCP gets no reply
        s = self.tcp_connect()
        q = header(0x2003, flags=0x8100) + question("allowed.test")
        s.sendall(struct.pack("!H", len(q)) + q)
        s.settimeout(0.5)
        try:
            got = s.recv(4096)
        except socket.timeout:
            got = None
        self.assertIn(got, (None, b""), "a response was answered: %r" % got)
        self.assertServing(tcp=True)
        self.assertServing()

    def test_tcp_idle_connection_closed(self):
        s = self.tcp_connect()
        t0 = time.monotonic()
        took, data = self.wait_eof(s, 3.0)
        self.assertIsNotNone(took, "silent TCP client kept open past 3 s (dns-tcp-idle-ms 1000)%s" % self.diag())
        self.assertEqual(data, b"")
        self.assertGreater(time.monotonic() - t0, 0.5, "closed long before the idle timeout")
        # a partial length prefix is no activity either
        s = self.tcp_connect()
        s.sendall(b"\x00")
        took, _ = self.wait_eof(s, 3.0)
        self.assertIsNotNone(took, "half a length prefix kept the connection open%s" % self.diag())
        self.assertServing(tcp=True)

    def test_tcp_pipelined_queries(self):
        s = self.tcp_connect()
        qs = [build_query("allowed.test", A, qid=0x3001), build_query("www.wild.test", A, qid=0x3002),
              build_query("other.test", A, qid=0x3003)]
        s.sendall(b"".join(struct.pack("!H", len(q)) + q for q in qs))
        got = {}
        for _ in qs:
            msg = self.tcp_read_message(s)
            self.assertIsNotNone(msg, "connection closed after %d answers%s" % (len(got), self.diag()))
            r = fake_dns.parse_response(msg)
            got[r["id"]] = r
        self.assertEqual(sorted(got), [0x3001, 0x3002, 0x3003])
        self.assertEqual([t for _, t, _ in got[0x3001]["answers"]], ["198.51.100.10"])
        self.assertEqual([t for _, t, _ in got[0x3002]["answers"]], ["198.51.100.12"])
        self.assertEqual(got[0x3003]["rcode"], REFUSED)

    # ---------------------------------------------------------- listeners and records

    def test_listeners_v4_and_v6(self):
        p = self.dns_proxy(dns_listen=["127.0.0.1:0", "[::1]:0"], allow_dns=["allowed.test"])
        self.assertEqual(len(p.dns_listeners), 2, p.stderr())
        self.assertEqual({h for h, _ in p.dns_listeners}, {"127.0.0.1", "::1"})
        for listener in p.dns_listeners:
            for tcp in (False, True):
                with self.subTest(listener=listener, tcp=tcp):
                    r, rec = self.query("allowed.test", "A", proxy=p, tcp=tcp, listener=listener,
                                        reason="allowlisted")
                    self.assertAnswered(r, "A", ["198.51.100.10"])
                    self.assertTrue(rec["client"].startswith("[::1]:" if ":" in listener[0] else "127.0.0.1:"),
                                    rec)

    def test_decision_records(self):
        p = self.dns_proxy(allow_dns=["allowed.test"])
        _, allow = self.query("allowed.test", "A", proxy=p, reason="allowlisted")
        _, deny = self.query("other.test", "A", status="REFUSED", proxy=p, tcp=True, reason="not_allowlisted")
        self.assertEqual(allow["qname"].lower(), "allowed.test")
        self.assertEqual(allow["addrs"], ["198.51.100.10"], allow)
        self.assertEqual(allow["rule"], "allowed.test", allow)
        self.assertEqual((deny["verdict"], deny["addrs"]), ("deny", []), deny)
        self.assertRegex(allow["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
        recs = p.dns_records()
        self.assertEqual(len(recs), 2, recs)      # one record per query, nothing else
        ids = [r["id"] for r in recs]
        self.assertEqual(len(set(ids)), len(ids), ids)
        self.assertEqual(len({r["gen"] for r in recs}), 1, recs)


class CnameTest(DnsCase):
    """Chains are judged by every address in the answer; targets need no allowlist entry."""
    proxy_config = {"dns_listen": ["127.0.0.1:0"],
                    "allow_dns": ["cname-private.test", "cname-public.test", "cname-out.test"]}

    def test_cname_to_private_address_refused(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("cname-private.test", "A", status="REFUSED", tcp=tcp)
                self.assertBlocked(r, rec, "10.0.0.0/8", "10.0.0.1")

    def test_cname_to_public_address_answered(self):
        for tcp in (False, True):
            with self.subTest(tcp=tcp):
                r, rec = self.query("cname-public.test", "A", tcp=tcp, reason="allowlisted")
                self.assertEqual(r.data("CNAME"), ["allowed.test."], r)
                self.assertEqual(r.data("A"), ["198.51.100.10"], r)
                self.assertTrue(any(same_addr(a, "198.51.100.10") for a in rec["addrs"]), rec)

    def test_cname_leaving_allowlist_answered(self):
        r, rec = self.query("cname-out.test", "A", reason="allowlisted")
        self.assertEqual(r.data("CNAME"), ["target.elsewhere.test."], r)
        self.assertEqual(r.data("A"), ["198.51.100.11"], r)
        # the upstream resolved the chain; the target was neither asked for nor needed a rule
        self.assertEqual(self.topo.dns_count("target.elsewhere.test/A"), 0, self.topo.dns_stats())
        r, _ = self.query("target.elsewhere.test", "A", status="REFUSED", reason="not_allowlisted")


if __name__ == "__main__":
    base.main()
