#!/usr/bin/env python3
"""Fake upstream servers for the integration tests.

Run inside a namespace:
    fake_upstream.py --addr 198.51.100.10 --addr 2001:db8::10 ... \
        --http 80,8080,8443 --echo 443 --bulk 9000 --log FILE --ready FILE \
        [--https 4443 --cert PEM --key PEM]

On every address it listens on every listed port:
- http: HTTP/1.1 with keep-alive. Every request gets 200 and a JSON body
  (Content-Length framed) that echoes the method, request target, version,
  Host, all received headers in order, the decoded body length and sha256,
  and the local/peer addresses. Chunked request bodies are decoded.
  Paths: /status/NNN answers with that status (204 and 304 without a body);
  /close adds Connection: close. HEAD gets the head only. /raw/NAME sends
  one of RAW_RESPONSES (broken or unusual framing) and closes, or, for the names in
  RAW_RESETS, resets the connection (RST) after a pause.
- echo: a TCP echo; on EOF from the peer it half-closes back. Bytes holding RESET_MARKER
  are not echoed: the connection is reset (RST) instead.
- bulk: integrity check for tunnels. The client sends a 28-byte header
  b"VPB1" + u64 n_down + u64 n_up + u64 seed (all big-endian). The server
  sends n_down bytes of pattern(seed) while it reads n_up bytes (or until
  EOF when n_up == 2**64-1), then sends a trailer: u64 bytes received +
  sha256 of them (32 bytes). Then it waits for EOF and closes.
- https: the http server above behind TLS with --cert/--key (ALPN http/1.1). Each
  handshake adds a line {"kind": "https-handshake", "sni": NAME or null} to the log, and
  each request {"kind": "https-request", "method": M, "target": T}. A target under /hash/
  is answered with the SHA-256 of each field's value instead of the fields; one under
  /git-auth/SHA256/ as a git server that wants the Authorization value of that SHA-256.
Every accepted connection is appended to the log file as one JSON line
{"local": "ip:port", "peer": "ip:port", "kind": ...}; canary instances use it
to prove that nothing ever dialled a blocked address.
"""

import argparse
import hashlib
import json
import random
import selectors
import socket
import ssl
import struct
import sys
import threading
import time

BULK_MAGIC = b"VPB1"
BULK_HEADER = struct.Struct("!4sQQQ")
BULK_UNTIL_EOF = 2 ** 64 - 1
PATTERN_BLOCK = 1 << 20
MAX_HEAD = 64 * 1024

_pattern_cache = {}


def _pattern_base(seed):
    base = _pattern_cache.get(seed)
    if base is None:
        base = random.Random(seed).randbytes(PATTERN_BLOCK)
        _pattern_cache[seed] = base
    return base


def pattern_chunks(seed, n):
    """Yield n bytes of a deterministic pattern in chunks of up to 1 MiB.

    Block k is the random base rotated by a k-dependent offset, so dropped,
    duplicated or reordered blocks change the digest.
    """
    base = _pattern_base(seed)
    k = 0
    while n > 0:
        off = (k * 7919 + 13) % PATTERN_BLOCK
        block = base[off:] + base[:off]
        take = min(n, PATTERN_BLOCK)
        yield block[:take]
        n -= take
        k += 1


def pattern_sha256(seed, n):
    h = hashlib.sha256()
    for chunk in pattern_chunks(seed, n):
        h.update(chunk)
    return h.hexdigest()


def fmt_addr(sockaddr):
    host, port = sockaddr[0], sockaddr[1]
    return ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)


class ConnLog:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.f = open(path, "a", buffering=1) if path else None

    def write(self, **rec):
        if self.f:
            with self.lock:
                self.f.write(json.dumps(rec) + "\n")


# ------------------------------------------------------------------ http

class BadRequest(Exception):
    pass


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def line(self, limit=MAX_HEAD):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit:
                raise BadRequest("line too long")
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD:
                raise BadRequest("head too long")
            self.fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        return head

    def exact(self, n, sink):
        while n > 0:
            if not self.buf:
                self.fill()
            take = self.buf[:n]
            self.buf = self.buf[len(take):]
            sink(take)
            n -= len(take)


def read_body(reader, headers, sink):
    te = [v.strip().lower() for k, v in headers if k.lower() == "transfer-encoding"]
    cl = [v.strip() for k, v in headers if k.lower() == "content-length"]
    if te:
        if te[-1].split(",")[-1].strip() != "chunked":
            raise BadRequest("unsupported transfer-encoding")
        while True:
            size_line = reader.line().split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise BadRequest("bad chunk size")
            if size == 0:
                while reader.line() != b"":   # trailers
                    pass
                return
            reader.exact(size, sink)
            if reader.line() != b"":
                raise BadRequest("bad chunk end")
    if cl:
        if len(set(cl)) != 1 or not cl[0].isdigit():
            raise BadRequest("bad content-length")
        reader.exact(int(cl[0]), sink)


# Misbehaving upstream answers, by name (GET /raw/NAME): each is followed by a close.
RAW_RESPONSES = {
    "cl-te": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "two-cl": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
    "garbage": b"NOT-HTTP garbage\r\n\r\n",
    "nothing": b"",
    "huge-head": b"HTTP/1.1 200 OK\r\nX-Big: " + b"h" * 200000 + b"\r\nContent-Length: 0\r\n\r\n",
    "until-close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody until close",
    "short-body": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-part",
    # one whole 1 KiB chunk, then 100 bytes of the next, then a reset (RAW_RESETS)
    "reset-chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + b"400\r\n" + b"a" * 1024 + b"\r\n" + b"400\r\n" + b"b" * 100,
}
RAW_RESETS = {"reset-chunked"}
RESET_MARKER = b"VP-RESET-NOW"


def reset(conn, pause=0.3):
    """End the connection with a TCP reset, once what was sent has had `pause` to arrive."""
    time.sleep(pause)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def pkt_line(text):
    data = text.encode()
    return b"%04x" % (len(data) + 4) + data


def git_refs_response(authorised, close):
    """The answer to GET .../info/refs?service=git-upload-pack (git protocol v0)."""
    end = "Connection: %s\r\n\r\n" % ("close" if close else "keep-alive")
    if not authorised:
        return ("HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\n"
                "Content-Length: 0\r\n" + end).encode()
    oid = "1" * 40
    body = (pkt_line("# service=git-upload-pack\n") + b"0000" +
            pkt_line(oid + " HEAD\0side-band-64k ofs-delta\n") +
            pkt_line(oid + " refs/heads/main\n") + b"0000")
    return ("HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\n"
            "Cache-Control: no-cache\r\nContent-Length: %d\r\n" % len(body) + end).encode() + body


def handle_http(conn, local, peer, log=None):
    reader = Reader(conn)
    served = 0
    while True:
        try:
            head = reader.head()
        except (EOFError, OSError):
            return
        except BadRequest:
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ")
            headers = []
            for ln in lines[1:]:
                name, value = ln.split(":", 1)
                headers.append((name, value.strip()))
            digest, length = hashlib.sha256(), [0]

            def sink(b):
                digest.update(b)
                length[0] += len(b)
            read_body(reader, headers, sink)
        except (ValueError, BadRequest):
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        except (EOFError, OSError):
            return
        served += 1
        if log is not None:
            log.write(kind="https-request", local=local, peer=peer, method=method, target=target)
        if target.startswith("/raw/"):
            raw = RAW_RESPONSES.get(target[5:])
            if raw:
                conn.sendall(raw)
            if target[5:] in RAW_RESETS:
                reset(conn)
            return                      # then close: the tests look at how the proxy copes
        conn_hdr = [v.lower() for k, v in headers if k.lower() == "connection"]
        close = (version == "HTTP/1.0" and "keep-alive" not in conn_hdr) or "close" in conn_hdr \
            or target.endswith("/close")
        status = 200
        if target.startswith("/status/"):
            try:
                status = int(target.split("/")[2])
            except ValueError:
                pass
        host = [v for k, v in headers if k.lower() == "host"]
        if target.startswith("/git-auth/"):
            # A git smart-HTTP server that wants one Authorization value, named by its SHA-256
            # in the path (/git-auth/SHA256/NAME.git/info/refs?service=git-upload-pack):
            # 401 without it, else a one-ref advertisement (enough for git ls-remote).
            want = target.split("/")[2]
            auth = [v for k, v in headers if k.lower() == "authorization"]
            ok = len(auth) == 1 and hashlib.sha256(auth[0].encode("latin-1")).hexdigest() == want
            conn.sendall(git_refs_response(ok, close))
            if close:
                return
            continue
        if target.startswith("/hash/"):
            # What a credential test needs to know without the secret crossing back: a hash
            # of each field's value (a list per name, in the order received).
            hashed = {}
            for k, v in headers:
                hashed.setdefault(k.lower(), []).append(hashlib.sha256(v.encode("latin-1")).hexdigest())
            body = json.dumps({"method": method, "target": target, "header_sha256": hashed,
                               "request_on_conn": served}).encode() + b"\n"
            conn.sendall(("HTTP/1.1 200 Fake\r\nContent-Type: application/json\r\n"
                          "Content-Length: %d\r\nConnection: %s\r\n\r\n"
                          % (len(body), "close" if close else "keep-alive")).encode() + body)
            if close:
                return
            continue
        body = json.dumps({
            "method": method, "target": target, "version": version,
            "host": host[0] if host else None, "headers": headers,
            "body_length": length[0], "body_sha256": digest.hexdigest(),
            "local": local, "peer": peer, "request_on_conn": served,
        }, indent=1).encode() + b"\n"
        bodyless = status in (204, 304)
        resp = ("HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\nX-Upstream: %s\r\n%s"
                "Connection: %s\r\n\r\n"
                % (status, local, "" if bodyless else "Content-Length: %d\r\n" % len(body),
                   "close" if close else "keep-alive")).encode()
        conn.sendall(resp + (b"" if method == "HEAD" or bodyless else body))
        if close:
            return


# ------------------------------------------------------------------ echo / bulk

def handle_echo(conn, local, peer):
    while True:
        data = conn.recv(65536)
        if not data:
            conn.shutdown(socket.SHUT_WR)
            return
        if RESET_MARKER in data:
            reset(conn, pause=0)
            return
        conn.sendall(data)


def handle_bulk(conn, local, peer):
    hdr = b""
    while len(hdr) < BULK_HEADER.size:
        chunk = conn.recv(BULK_HEADER.size - len(hdr))
        if not chunk:
            return
        hdr += chunk
    magic, n_down, n_up, seed = BULK_HEADER.unpack(hdr)
    if magic != BULK_MAGIC:
        return
    errors = []

    def sender():
        try:
            for chunk in pattern_chunks(seed, n_down):
                conn.sendall(chunk)
        except OSError as e:
            errors.append(e)
    t = threading.Thread(target=sender, daemon=True)
    t.start()
    h, got = hashlib.sha256(), 0
    while n_up == BULK_UNTIL_EOF or got < n_up:
        want = 1 << 20 if n_up == BULK_UNTIL_EOF else min(1 << 20, n_up - got)
        data = conn.recv(want)
        if not data:
            break
        h.update(data)
        got += len(data)
    t.join()
    if errors:
        return
    conn.sendall(struct.pack("!Q", got) + h.digest())
    if n_up != BULK_UNTIL_EOF:
        while conn.recv(65536):   # wait for the client's EOF
            pass


HANDLERS = {"http": handle_http, "echo": handle_echo, "bulk": handle_bulk}
TLS = {}    # "context": the server's ssl.SSLContext, with --https


def tls_context(cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    names = {}

    def remember(sock, name, _ctx):
        names[id(sock)] = name
    ctx.sni_callback = remember
    return ctx, names


def serve_https(conn, local, peer, log):
    ctx, names = TLS["context"]
    tls = ctx.wrap_socket(conn, server_side=True)
    log.write(kind="https-handshake", local=local, peer=peer, sni=names.pop(id(tls), None))
    handle_http(tls, local, peer, log)


def serve_conn(kind, conn, log):
    local, peer = fmt_addr(conn.getsockname()), fmt_addr(conn.getpeername())
    log.write(kind=kind, local=local, peer=peer)
    conn.settimeout(120)
    # As servers do: without it, a response written after a small segment (TLS 1.3's session
    # tickets) waits for the delayed ACK of that segment, 40 ms.
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if kind == "https":
            serve_https(conn, local, peer, log)
        else:
            HANDLERS[kind](conn, local, peer)
    except (OSError, EOFError, ssl.SSLError):
        pass
    finally:
        conn.close()


def parse_ports(text):
    return [int(p) for p in text.split(",") if p]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", action="append", required=True)
    ap.add_argument("--http", default="")
    ap.add_argument("--echo", default="")
    ap.add_argument("--bulk", default="")
    ap.add_argument("--https", default="")
    ap.add_argument("--cert", default="")
    ap.add_argument("--key", default="")
    ap.add_argument("--log", default="")
    ap.add_argument("--ready", required=True)
    args = ap.parse_args()

    log = ConnLog(args.log)
    if args.https:
        TLS["context"] = tls_context(args.cert, args.key)
    sel = selectors.DefaultSelector()
    for addr in args.addr:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        for kind in ("http", "echo", "bulk", "https"):
            for port in parse_ports(getattr(args, kind)):
                s = socket.socket(family, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((addr, port))
                s.listen(256)
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ, kind)
    with open(args.ready, "w") as f:
        f.write("ready\n")
    while True:
        for key, _ in sel.select():
            try:
                conn, _ = key.fileobj.accept()
            except OSError:
                continue
            conn.setblocking(True)
            threading.Thread(target=serve_conn, args=(key.data, conn, log), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
