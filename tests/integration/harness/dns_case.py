"""What the DNS tests share: dig and its parsed result, raw DNS messages, and DnsCase,
a topology case with a proxy whose DNS server answers on 127.0.0.1, whose queries check
their decision records."""
import datetime
import ipaddress
import re
import socket
import struct
import time

from . import base, fake_dns, netns
from .fake_dns import A, encode_name
from .wait import LIVENESS_S

RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
REASONS = {"allowlisted", "not_allowlisted", "blocked_address", "resolve_failed", "invalid_target",
           "rate_limited", "overloaded"}
RECORD_KEYS = ("id", "ts", "src", "event", "client", "qname", "qtype", "rcode", "addrs", "cached",
               "verdict", "reason", "gen", "transport")
DIG_TIMEOUT = int(LIVENESS_S)   # dig's +time: whole seconds, one try
DENY_REASONS = {"not_allowlisted", "blocked_address", "rate_limited"}   # always verdict deny
CLIENT_RE = re.compile(r"^(127\.0\.0\.1|\[::1\]):\d+$")

ALLOW_DNS = ["allowed.test", "dual.test", "v6.test", "*.wild.test", "rebind-private.test",
             "rebind-loopback.test", "rebind-v6.test", "mapped.test", "https-ok.test",
             "https-private.test", "https-v6private.test", "txt.test", "mx.test",
             "rebind-authority.test"]


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


def dig(topo, host, port, name, qtype="A", tcp=False, opts=(), timeout=DIG_TIMEOUT, source_port=None):
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

    def dig(self, name, qtype="A", proxy=None, tcp=False, opts=(), timeout=DIG_TIMEOUT, listener=None,
            source_port=None):
        p = proxy or self.proxy
        host, port = listener or (p.dns_host, p.dns_port)
        return dig(self.topo, host, port, name, qtype, tcp=tcp, opts=opts, timeout=timeout,
                   source_port=source_port)

    def query(self, name, qtype="A", status="NOERROR", proxy=None, tcp=False, opts=(), reason=None,
              timeout=DIG_TIMEOUT, listener=None):
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
                                  record_time(rec) >= sent)
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

    def udp_exchange(self, payload, proxy=None, timeout=LIVENESS_S):
        """Send one datagram to the DNS listener; the reply, or None after `timeout` (pass a
        short one where no reply is a right answer)."""
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

    def tcp_connect(self, proxy=None, timeout=LIVENESS_S):
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

    def tcp_exchange(self, payload, proxy=None, timeout=LIVENESS_S):
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
