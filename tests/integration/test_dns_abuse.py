"""The DNS server under abuse: the per-client rate limit, malformed packets over UDP and
TCP, idle and pipelined TCP clients. Other clients keep being served."""

import os
import random
import socket
import struct
import threading
import time

from tests.integration.harness import base, fake_dns
from tests.integration.harness.dns_case import ALLOW_DNS, RCODE_NAMES, DnsCase, header, question, reply_head
from tests.integration.harness.fake_dns import A, FORMERR, NOTIMP, REFUSED, build_query, encode_name
from tests.integration.harness.wait import LIVENESS_S, poll, wait_until, within


class DnsAbuseTest(DnsCase):
    proxy_config = {"dns_listen": ["127.0.0.1:0"], "allow_dns": ALLOW_DNS, "dns_tcp_idle_ms": 1000}

    # ---------------------------------------------------------- rate limit

    def test_client_rate_limit(self):
        # One token a second: however slowly a busy machine sends the 200 queries, the
        # bucket refills by a few, so the counts are fixed and the bound on answers is
        # burst + qps x the seconds the exchange took.
        qps, burst, n = 1, 20, 200
        p = self.dns_proxy(allow_dns=["allowed.test"], dns_client_qps=qps, dns_client_burst=burst)
        self.assertServing(proxy=p)      # fills the cache: the burst is not held up upstream
        s = self.topo.socket(self.topo.px, socket.AF_INET, socket.SOCK_DGRAM)
        self.addCleanup(s.close)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        dest = (p.dns_host, p.dns_port)
        t0 = time.monotonic()
        sent = 0
        while sent < n:
            try:
                s.sendto(build_query("allowed.test", A, qid=sent + 1), dest)
                sent += 1
            except OSError:
                time.sleep(0.001)
        rcodes = {}
        s.settimeout(LIVENESS_S)         # every query is answered, REFUSED or not
        while len(rcodes) < sent:
            try:
                msg = s.recv(4096)
            except socket.timeout:
                break
            qid, qr, _, _, rcode = reply_head(msg)
            self.assertTrue(qr)
            rcodes[qid] = rcode
        elapsed = time.monotonic() - t0
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
        # the bucket refills (a token a second): the client is answered again
        self.assertTrue(wait_until(lambda: self.dig("allowed.test", proxy=p).status == "NOERROR",
                                   interval=0.2), "still refused after the bucket refilled" + p.diag())

    def test_flood_over_the_limit_is_folded_into_summaries(self):
        """100 000 queries from one client over its rate: the log holds a handful of whole
        records and one summary per second, and their counts add up to every query."""
        n = 100_000
        # No idle deadline within reach: a busy machine may pause the flood for a while.
        p = self.dns_proxy(allow_dns=["allowed.test"], dns_client_qps=10, dns_client_burst=10,
                           dns_tcp_idle_ms=int(1000 * LIVENESS_S * 6))
        size_before = os.path.getsize(p.log_path)
        # Built before connecting: the time it takes would count against dns-tcp-idle-ms.
        wire = b"".join(struct.pack("!H", len(q)) + q
                        for q in (build_query("other.test", A, qid=i & 0xFFFF) for i in range(n)))
        s = self.tcp_connect(proxy=p, timeout=30)
        client = "127.0.0.1:%d" % s.getsockname()[1]
        sender = threading.Thread(target=s.sendall, args=(wire,), daemon=True)
        t0 = time.monotonic()
        sender.start()
        buf, answers, rcodes = b"", 0, {}
        deadline = time.monotonic() + 60
        while answers < n and time.monotonic() < deadline:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
            pos = 0
            while len(buf) - pos >= 2:
                size = struct.unpack_from("!H", buf, pos)[0]
                if len(buf) - pos - 2 < size:
                    break
                rcode = buf[pos + 5] & 0x0F
                rcodes[rcode] = rcodes.get(rcode, 0) + 1
                pos += 2 + size
                answers += 1
            buf = buf[pos:]
        seconds = time.monotonic() - t0
        sender.join(5)
        self.assertEqual(answers, n, "answers to %d of %d queries%s" % (answers, n, p.diag()))
        self.assertEqual(rcodes, {REFUSED: n}, rcodes)

        mine = lambda r: r.get("client") == client
        total = lambda recs: sum(r.get("count", 1) for r in recs)
        # summaries are written when their second ends
        recs = poll(lambda: p.dns_records(mine), lambda recs: total(recs) >= n, interval=0.1)
        summaries = [r for r in recs if "count" in r]
        self.assertEqual(total(recs), n, "records account for %d of %d queries: %d records, %d "
                         "summaries%s" % (total(recs), n, len(recs), len(summaries), p.diag()))
        self.assertTrue(summaries, "no summary record")
        for r in summaries:
            self.assertEqual((r["verdict"], r["interval_ms"]), ("deny", 1000), r)
            self.assertGreater(r["count"], 0, r)
            self.assertEqual(r["gen"], 1, r)
        self.assertIn("rate_limited", {r["reason"] for r in summaries})
        # Whole records only for queries within the bucket (burst, then qps a second) and a
        # summary for each second the flood touched: a bound in the flood's own seconds,
        # which a busy machine stretches, rather than in bytes for the whole.
        bound = 10 + (10 + 1) * (int(seconds) + 2)
        grown = os.path.getsize(p.log_path) - size_before
        self.assertLessEqual(len(recs), bound, "%d records (%d bytes) for %d queries in %.1f s"
                             % (len(recs), grown, n, seconds))

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
                # Where no reply is acceptable a short wait suffices: a busy machine can
                # only make a late reply go unseen, never fail the case.
                msg = self.udp_exchange(payload, timeout=LIVENESS_S if expect_reply else 0.5)
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
        took, data = self.wait_eof(s, LIVENESS_S)
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
        took, data = self.wait_eof(s, within(1.0))
        self.assertIsNotNone(took, "silent TCP client kept open past %g s (dns-tcp-idle-ms 1000)%s"
                             % (within(1.0), self.diag()))
        self.assertEqual(data, b"")
        self.assertGreater(time.monotonic() - t0, 0.5, "closed long before the idle timeout")
        # a partial length prefix is no activity either
        s = self.tcp_connect()
        s.sendall(b"\x00")
        took, _ = self.wait_eof(s, within(1.0))
        self.assertIsNotNone(took, "half a length prefix kept the connection open%s" % self.diag())
        self.assertServing(tcp=True)

    def test_tcp_declared_length_is_not_allocated_up_front(self):
        """Clients that declare 64 KiB and send one byte cost what they sent, not 64 KiB each.

        Judged against a baseline taken in the same run: n clients that declare 12 bytes and
        send one. The difference is the price of the declaration alone, which keeps the
        per-connection cost of the build (sanitizer shadow memory included) out of the figure."""
        n = 300
        # An idle deadline no slow machine reaches, so that every client is still held when
        # the resident set is read, and that only once the proxy has read every byte sent.
        p = self.dns_proxy(allow_dns=ALLOW_DNS, dns_tcp_idle_ms=120000, dns_max_tcp=4 * n)
        self.assertServing(proxy=p, tcp=True)
        held = []

        def all_read():
            # the server's side of every held connection, accepted and drained (Recv-Q 0)
            r = self.topo.run(self.topo.px, ["ss", "-tnH", "state", "established",
                                             "sport = :%d" % p.dns_port], timeout=LIVENESS_S)
            queues = [int(line.split()[0]) for line in r.stdout.decode().splitlines() if line.strip()]
            return len(queues) >= len(held) and not any(queues)

        def hold(prefix):
            before = p.rss_kib()
            for _ in range(n):
                s = self.tcp_connect(proxy=p)
                s.sendall(prefix + b"\x00")
                held.append(s)
            self.assertTrue(wait_until(all_read), "the proxy did not read every client's byte" + p.diag())
            return p.rss_kib() - before

        try:
            small = hold(b"\x00\x0c")
            large = hold(b"\xff\xff")
        finally:
            for s in held:
                s.close()
        self.assertLess(large - small, n * 64 // 4,
                        "RSS grew %d KiB for %d clients declaring 64 KiB, %d KiB for as many declaring "
                        "12 bytes; each sent one byte" % (large, n, small))
        self.assertServing(proxy=p, tcp=True)

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


if __name__ == "__main__":
    base.main()
