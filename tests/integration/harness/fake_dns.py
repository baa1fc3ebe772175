#!/usr/bin/env python3
"""Authoritative fake DNS server for the integration tests (UDP and TCP).

Run inside the "net" namespace:
    fake_dns.py --listen 203.0.113.2 --port 53 --stats FILE

It answers A and AAAA for the names in ZONE below, NODATA (with an SOA) when
a name exists but has no record of that type, and NXDOMAIN for unknown
names. EDNS OPT records in queries are ignored (replies carry no OPT).
After binding, and after every query, it rewrites FILE (atomically) with
JSON counters: {"total", "udp", "tcp", "queries": {"name/TYPE": n}}.
The harness treats the first write of FILE as "ready".

The same module also holds a tiny stub client (build_query/parse_response)
that the harness self-tests use instead of dig.
"""

import argparse
import ipaddress
import json
import os
import socket
import struct
import sys
import threading

A, NS, CNAME, SOA, AAAA, OPT = 1, 2, 5, 6, 28, 41
TYPE_NAMES = {A: "A", NS: "NS", CNAME: "CNAME", SOA: "SOA", AAAA: "AAAA", OPT: "OPT"}
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5

DEFAULT_TTL = 30

# name -> {qtype: [address text]}.  Special behaviours are in Server.lookup.
ZONE = {
    "allowed.test": {A: ["198.51.100.10"]},
    "other.test": {A: ["198.51.100.11"]},
    "wild.test": {A: ["198.51.100.12"]},
    "www.wild.test": {A: ["198.51.100.12"]},
    "a.b.wild.test": {A: ["198.51.100.12"]},
    "third.test": {A: ["198.51.100.13"]},
    "rebind-private.test": {A: ["10.0.0.1"]},
    "rebind-loopback.test": {A: ["127.0.0.1"]},
    "rebind-mixed.test": {A: ["10.0.0.1", "198.51.100.10"]},
    "rebind-v6.test": {AAAA: ["::1"]},
    "mapped.test": {AAAA: ["::ffff:10.0.0.1"]},
    "linklocal.test": {A: ["169.254.169.254"]},
    "rebind-cgnat.test": {A: ["100.64.0.1"]},
    "rebind-zero.test": {A: ["0.0.0.0"]},
    "rebind-ula.test": {AAAA: ["fd00::1"]},
    "rebind-nat64.test": {AAAA: ["64:ff9b::a00:1"]},     # embeds 10.0.0.1
    "rebind-6to4.test": {AAAA: ["2002:a00:1::1"]},       # embeds 10.0.0.1
    "v6.test": {AAAA: ["2001:db8::10"]},
    "dual.test": {A: ["198.51.100.10"], AAAA: ["2001:db8::10"]},
    "dead.test": {A: ["198.51.100.19"]},
    "blackhole.test": {A: ["198.51.100.250"]},
    "flip.test": {},        # A alternates, see lookup()
    "servfail.test": {},    # always SERVFAIL
    "drop.test": {},        # never answered
}
WILDCARD_SUFFIX = ".wild.test"   # any other name under wild.test -> 198.51.100.12
FLIP_ADDRS = ["198.51.100.10", "10.0.0.1"]
SOA_OWNER = "test"


def encode_name(name):
    out = b""
    for label in name.strip(".").split("."):
        if label:
            raw = label.encode("ascii")
            out += bytes([len(raw)]) + raw
    return out + b"\x00"


def read_name(msg, off):
    """Return (name, offset after the name); follows compression pointers."""
    labels, jumped, end, hops = [], False, off, 0
    while True:
        if off >= len(msg):
            raise ValueError("name runs past message")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg) or hops > 16:
                raise ValueError("bad pointer")
            ptr = ((n & 0x3F) << 8) | msg[off + 1]
            if not jumped:
                end = off + 2
            jumped, off, hops = True, ptr, hops + 1
            continue
        if n & 0xC0:
            raise ValueError("bad label type")
        off += 1
        if n == 0:
            break
        labels.append(msg[off:off + n].decode("ascii", "replace"))
        off += n
    return ".".join(labels), (end if jumped else off)


def rdata_for(qtype, text):
    if qtype == A:
        return ipaddress.IPv4Address(text).packed
    return ipaddress.IPv6Address(text).packed


def soa_record():
    rdata = (encode_name("ns.test") + encode_name("hostmaster.test")
             + struct.pack("!IIIII", 1, 3600, 600, 86400, 5))
    return encode_name(SOA_OWNER) + struct.pack("!HHIH", SOA, 1, 5, len(rdata)) + rdata


class Server:
    def __init__(self, stats_path):
        self.stats_path = stats_path
        self.lock = threading.Lock()
        self.stats = {"total": 0, "udp": 0, "tcp": 0, "queries": {}}
        self.flip = 0

    def write_stats(self):
        tmp = self.stats_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.stats, f)
        os.replace(tmp, self.stats_path)

    def count(self, transport, name, qtype):
        with self.lock:
            self.stats["total"] += 1
            self.stats[transport] += 1
            key = "%s/%s" % (name, TYPE_NAMES.get(qtype, str(qtype)))
            self.stats["queries"][key] = self.stats["queries"].get(key, 0) + 1
            self.write_stats()

    def lookup(self, name, qtype):
        """Return (rcode, [(qtype, text, ttl)]) or None to drop the query."""
        if name == "drop.test":
            return None
        if name == "servfail.test":
            return SERVFAIL, []
        if name == "flip.test":
            if qtype != A:
                return NOERROR, []
            with self.lock:
                addr = FLIP_ADDRS[self.flip % len(FLIP_ADDRS)]
                self.flip += 1
            return NOERROR, [(A, addr, 0)]
        records = ZONE.get(name)
        if records is None and name.endswith(WILDCARD_SUFFIX):
            records = {A: ["198.51.100.12"]}
        if records is None:
            return NXDOMAIN, []
        return NOERROR, [(qtype, t, DEFAULT_TTL) for t in records.get(qtype, [])]

    def handle(self, query, transport):
        """Return reply bytes, or None for no reply."""
        if len(query) < 12:
            return None
        qid, flags, qd, _an, _ns, _ar = struct.unpack("!HHHHHH", query[:12])
        if flags & 0x8000:          # a response: never answer those
            return None
        opcode = (flags >> 11) & 0xF
        rd = flags & 0x0100

        def reply(rcode, question=b"", answers=(), authority=()):
            fl = 0x8000 | (opcode << 11) | 0x0400 | rd | rcode
            head = struct.pack("!HHHHHH", qid, fl, 1 if question else 0,
                               len(answers), len(authority), 0)
            return head + question + b"".join(answers) + b"".join(authority)

        if opcode != 0:
            return reply(NOTIMP)
        if qd != 1:
            return reply(FORMERR)
        try:
            qname, off = read_name(query, 12)
            qtype, qclass = struct.unpack("!HH", query[off:off + 4])
        except (ValueError, struct.error):
            return reply(FORMERR)
        question = query[12:off + 4]     # echoed verbatim: keeps 0x20 case
        name = qname.lower().rstrip(".")
        self.count(transport, name, qtype)
        if qclass != 1:
            return reply(REFUSED, question)
        result = self.lookup(name, qtype)
        if result is None:
            return None
        rcode, records = result
        answers = []
        for rtype, text, ttl in records:
            rdata = rdata_for(rtype, text)
            answers.append(struct.pack("!HHHIH", 0xC00C, rtype, 1, ttl, len(rdata)) + rdata)
        authority = [soa_record()] if (rcode == NXDOMAIN or (rcode == NOERROR and not answers)) else []
        return reply(rcode, question, answers, authority)

    def serve_udp(self, sock):
        while True:
            try:
                data, peer = sock.recvfrom(65535)
            except OSError:
                continue
            out = self.handle(data, "udp")
            if out is not None:
                try:
                    sock.sendto(out, peer)
                except OSError:
                    pass

    def serve_tcp_conn(self, conn):
        conn.settimeout(10)
        try:
            while True:
                head = recv_exact(conn, 2)
                if head is None:
                    return
                (n,) = struct.unpack("!H", head)
                data = recv_exact(conn, n)
                if data is None:
                    return
                out = self.handle(data, "tcp")
                if out is not None:
                    conn.sendall(struct.pack("!H", len(out)) + out)
        except OSError:
            pass
        finally:
            conn.close()

    def serve_tcp(self, lsock):
        while True:
            try:
                conn, _ = lsock.accept()
            except OSError:
                continue
            threading.Thread(target=self.serve_tcp_conn, args=(conn,), daemon=True).start()


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


# ---------------------------------------------------------------- stub client

def build_query(name, qtype, qid=0x1234, edns=False):
    head = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    q = head + encode_name(name) + struct.pack("!HH", qtype, 1)
    if edns:   # OPT: root name, type 41, udp size 1232, no options
        q += b"\x00" + struct.pack("!HHIH", OPT, 1232, 0, 0)
    return q


def parse_response(msg):
    """Return dict(id, rcode, aa, tc, answers=[(type, text, ttl)], nscount)."""
    qid, flags, qd, an, ns, _ar = struct.unpack("!HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    answers = []
    for _ in range(an):
        _, off = read_name(msg, off)
        rtype, _cls, ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
        off += 10
        rdata = msg[off:off + rdlen]
        off += rdlen
        if rtype == A:
            text = str(ipaddress.IPv4Address(rdata))
        elif rtype == AAAA:
            text = str(ipaddress.IPv6Address(rdata))
        else:
            text = rdata.hex()
        answers.append((rtype, text, ttl))
    return {"id": qid, "rcode": flags & 0xF, "aa": bool(flags & 0x0400),
            "tc": bool(flags & 0x0200), "answers": answers, "nscount": ns}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="203.0.113.2")
    ap.add_argument("--port", type=int, default=53)
    ap.add_argument("--stats", required=True)
    args = ap.parse_args()

    server = Server(args.stats)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((args.listen, args.port))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((args.listen, args.port))
    tcp.listen(128)
    threading.Thread(target=server.serve_tcp, args=(tcp,), daemon=True).start()
    server.write_stats()    # signals readiness
    server.serve_udp(udp)


if __name__ == "__main__":
    sys.exit(main())
