#!/usr/bin/env python3
"""Authoritative fake DNS server for the integration tests (UDP and TCP).

Run inside the "net" namespace:
    fake_dns.py --listen 203.0.113.2 --port 53 --stats FILE

It answers the records in ZONE below (A, AAAA, CNAME chains, HTTPS, TXT,
MX), NODATA (with an SOA) when a name exists but has no record of that type,
and NXDOMAIN for unknown names. A query with an EDNS OPT gets an OPT back
(payload 1232) and its UDP payload size is honoured (at least 512); a UDP
answer that does not fit is sent with TC set and only the question (big.test
always needs that without EDNS; over TCP it comes whole). ANY gets every
record of the name; zone transfers get NOTIMP.
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

A, NS, CNAME, SOA, HINFO, MX, TXT, AAAA, OPT = 1, 2, 5, 6, 13, 15, 16, 28, 41
SVCB, HTTPS, IXFR, AXFR, ANY = 64, 65, 251, 252, 255
TYPE_NAMES = {A: "A", NS: "NS", CNAME: "CNAME", SOA: "SOA", HINFO: "HINFO", MX: "MX", TXT: "TXT",
              AAAA: "AAAA", OPT: "OPT", SVCB: "SVCB", HTTPS: "HTTPS", IXFR: "IXFR", AXFR: "AXFR",
              ANY: "ANY"}
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5

DEFAULT_TTL = 30
TTLS = {"short.test": 1}        # names whose records carry another TTL
EDNS_PAYLOAD = 1232             # what our own OPT advertises

# name -> {qtype: [address text]}.  Special behaviours are in Server.lookup.
ZONE = {
    "allowed.test": {A: ["198.51.100.10"]},
    "other.test": {A: ["198.51.100.11"]},
    "wild.test": {A: ["198.51.100.12"]},
    "www.wild.test": {A: ["198.51.100.12"]},
    "a.b.wild.test": {A: ["198.51.100.12"]},
    "third.test": {A: ["198.51.100.13"]},
    # TLS inspection's e2e: hosts the fake internet's certificate names beside allowed.test
    "inspected.test": {A: ["198.51.100.10"]},
    "late.test": {A: ["198.51.100.10"]},
    # vibepit ci's learn test: several names under one registrable domain, one elsewhere
    "a.pkg.test": {A: ["198.51.100.10"]},
    "b.pkg.test": {A: ["198.51.100.10"]},
    "c.pkg.test": {A: ["198.51.100.10"]},
    "api.other.test": {A: ["198.51.100.11"]},
    "rebind-private.test": {A: ["10.0.0.1"]},
    "rebind-authority.test": {A: ["198.51.100.10"]},   # plus 10.0.0.1 in AUTHORITY, see handle()
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
    # CNAME chains: the answer holds the CNAME and the target's records (see lookup()).
    "cname-private.test": {CNAME: ["rebind-private.test"]},
    "cname-public.test": {CNAME: ["allowed.test"]},
    "cname-out.test": {CNAME: ["target.elsewhere.test"]},
    "target.elsewhere.test": {A: ["198.51.100.11"]},
    # HTTPS (type 65): (priority, target, [(SvcParamKey, value)]), see svcb_rdata().
    "https-ok.test": {HTTPS: [(1, ".", [("alpn", ["h2"]), ("ipv4hint", ["198.51.100.10"]),
                                        ("ipv6hint", ["2001:db8::10"])])],
                      A: ["198.51.100.10"]},
    "https-private.test": {HTTPS: [(1, ".", [("ipv4hint", ["10.0.0.1"])])]},
    "https-v6private.test": {HTTPS: [(1, ".", [("ipv6hint", ["::1"])])]},
    "big.test": {A: ["198.51.100.%d" % i for i in range(100, 140)]},   # 40 records: > 512 bytes
    "short.test": {A: ["198.51.100.14"]},                                # TTL 1 (TTLS)
    "txt.test": {TXT: [["hello"]]},
    "mx.test": {MX: [(10, "allowed.test")]},
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


SVC_KEYS = {"mandatory": 0, "alpn": 1, "no-default-alpn": 2, "port": 3, "ipv4hint": 4,
            "ech": 5, "ipv6hint": 6}


def svcb_rdata(value):
    """RFC 9460 wire form: priority, uncompressed target, params in ascending key order."""
    priority, target, params = value
    out = struct.pack("!H", priority) + encode_name(target)
    for key, vals in sorted(params, key=lambda kv: SVC_KEYS[kv[0]]):
        if key == "alpn":
            body = b"".join(bytes([len(v)]) + v.encode("ascii") for v in vals)
        elif key == "ipv4hint":
            body = b"".join(ipaddress.IPv4Address(v).packed for v in vals)
        elif key == "ipv6hint":
            body = b"".join(ipaddress.IPv6Address(v).packed for v in vals)
        elif key == "port":
            body = struct.pack("!H", vals[0])
        else:
            raise ValueError("no encoder for SvcParamKey %s" % key)
        out += struct.pack("!HH", SVC_KEYS[key], len(body)) + body
    return out


def rdata_for(qtype, value):
    if qtype == A:
        return ipaddress.IPv4Address(value).packed
    if qtype == AAAA:
        return ipaddress.IPv6Address(value).packed
    if qtype in (CNAME, NS):
        return encode_name(value)
    if qtype == MX:
        return struct.pack("!H", value[0]) + encode_name(value[1])
    if qtype == TXT:
        return b"".join(bytes([len(s)]) + s.encode("ascii") for s in value)
    if qtype in (HTTPS, SVCB):
        return svcb_rdata(value)
    raise ValueError("no encoder for type %d" % qtype)


def parse_opt(msg, off, an, ns, ar):
    """Walk the sections after the question; return the OPT's payload size or None.

    Raises ValueError on a message that ends inside a record."""
    for _ in range(an + ns):
        _, off = read_name(msg, off)
        if off + 10 > len(msg):
            raise ValueError("record header runs past message")
        (rdlen,) = struct.unpack("!H", msg[off + 8:off + 10])
        off += 10 + rdlen
        if off > len(msg):
            raise ValueError("rdata runs past message")
    payload = None
    for _ in range(ar):
        _, off = read_name(msg, off)
        if off + 10 > len(msg):
            raise ValueError("record header runs past message")
        rtype, rclass, _ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
        off += 10 + rdlen
        if off > len(msg):
            raise ValueError("rdata runs past message")
        if rtype == OPT:
            if payload is not None:
                raise ValueError("two OPT records")
            payload = rclass
    return payload


def opt_record():
    return b"\x00" + struct.pack("!HHIH", OPT, EDNS_PAYLOAD, 0, 0)


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
        """Return (rcode, [(rtype, value, ttl)]) or None to drop the query.

        A record may also be (owner, rtype, value, ttl) when its owner is not
        the query name (the targets of CNAME chains)."""
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
        records = self.records_of(name)
        if records is None:
            return NXDOMAIN, []
        ttl = TTLS.get(name, DEFAULT_TTL)
        if qtype == ANY:
            return NOERROR, [(t, v, ttl) for t in sorted(records) for v in records[t]]
        out = [(qtype, v, ttl) for v in records.get(qtype, [])]
        owner = name
        for _ in range(8):        # follow a CNAME chain inside the zone, boundedly
            targets = records.get(CNAME, [])
            if out or qtype == CNAME or not targets:
                break
            target = targets[0]
            out.append((owner, CNAME, target, TTLS.get(owner, DEFAULT_TTL)))
            owner, records = target, self.records_of(target) or {}
            out += [(owner, qtype, v, TTLS.get(owner, DEFAULT_TTL)) for v in records.get(qtype, [])]
            if records.get(qtype):
                break
        return NOERROR, out

    @staticmethod
    def records_of(name):
        records = ZONE.get(name)
        if records is None and name.endswith(WILDCARD_SUFFIX):
            records = {A: ["198.51.100.12"]}
        return records

    def handle(self, query, transport):
        """Return reply bytes, or None for no reply."""
        if len(query) < 12:
            return None
        qid, flags, qd, _an, _ns, _ar = struct.unpack("!HHHHHH", query[:12])
        if flags & 0x8000:          # a response: never answer those
            return None
        opcode = (flags >> 11) & 0xF
        rd = flags & 0x0100

        edns = [None]    # the query's OPT payload size, once known

        def reply(rcode, question=b"", answers=(), authority=(), tc=0):
            fl = 0x8000 | (opcode << 11) | 0x0400 | tc | rd | rcode
            extra = [opt_record()] if edns[0] is not None else []
            head = struct.pack("!HHHHHH", qid, fl, 1 if question else 0,
                               len(answers), len(authority), len(extra))
            return head + question + b"".join(answers) + b"".join(authority) + b"".join(extra)

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
        try:
            edns[0] = parse_opt(query, off + 4, _an, _ns, _ar)
        except (ValueError, struct.error):
            return reply(FORMERR, question)
        name = qname.lower().rstrip(".")
        self.count(transport, name, qtype)
        if qclass != 1:
            return reply(REFUSED, question)
        if qtype in (AXFR, IXFR):
            return reply(NOTIMP, question)
        result = self.lookup(name, qtype)
        if result is None:
            return None
        rcode, records = result
        answers = []
        for rec in records:
            owner, rtype, value, ttl = rec if len(rec) == 4 else (None,) + tuple(rec)
            rdata = rdata_for(rtype, value)
            owner_wire = struct.pack("!H", 0xC00C) if owner is None else encode_name(owner)
            answers.append(owner_wire + struct.pack("!HHIH", rtype, 1, ttl, len(rdata)) + rdata)
        authority = [soa_record()] if (rcode == NXDOMAIN or (rcode == NOERROR and not answers)) else []
        if name == "rebind-authority.test":    # a public answer, a private address beside it
            glue = rdata_for(A, "10.0.0.1")
            authority.append(encode_name("ns.rebind-authority.test") +
                             struct.pack("!HHIH", A, 1, DEFAULT_TTL, len(glue)) + glue)
        out = reply(rcode, question, answers, authority)
        limit = max(512, edns[0] or 0)
        if transport == "udp" and len(out) > limit:
            return reply(rcode, question, tc=0x0200)
        return out

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

def build_query(name, qtype, qid=0x1234, edns=False, payload=1232):
    head = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    q = head + encode_name(name) + struct.pack("!HH", qtype, 1)
    if edns:   # OPT: root name, type 41, udp size `payload`, no options
        q += b"\x00" + struct.pack("!HHIH", OPT, payload, 0, 0)
    return q


def parse_response(msg):
    """Return dict(id, rcode, aa, tc, answers=[(type, text, ttl)], nscount, arcount, opt)."""
    qid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", msg[:12])
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
    try:
        opt = parse_opt(msg, off, 0, ns, ar)
    except (ValueError, struct.error):
        opt = None
    return {"id": qid, "rcode": flags & 0xF, "aa": bool(flags & 0x0400),
            "tc": bool(flags & 0x0200), "answers": answers, "nscount": ns, "arcount": ar,
            "opt": opt}


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
