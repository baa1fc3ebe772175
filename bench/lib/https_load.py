#!/usr/bin/env python3
"""HTTPS requests through a CONNECT proxy, for bench/suites/inspect.py: each of N threads
CONNECTs to HOST:PORT, speaks TLS (SNI HOST, the certificate verified against --cafile),
and GETs PATH: many requests on one connection (keep-alive), or one request per connection
(new: CONNECT and TLS every time). Bounded by --duration and --max. Prints one JSON object:
{"requests", "errors", "seconds", "first_error"}. With --mode hold, each connection makes
one request and then stays open and idle: one line {"open": N} once all are, then the
connections are held for --duration seconds. Standard library only: it runs under
`ip netns exec`, outside the repository's import path."""

import argparse
import json
import socket
import ssl
import threading
import time


class Failed(Exception):
    pass


def read_head(sock, buf):
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise Failed("closed before a response head")
        buf += data
    end = buf.index(b"\r\n\r\n") + 4
    return bytes(buf[:end]), buf[end:]


def read_response(sock, buf):
    """One response (Content-Length framed), its status; `buf` keeps what follows it."""
    head, rest = read_head(sock, buf)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        data = sock.recv(65536)
        if not data:
            raise Failed("closed in a response body")
        rest += data
    buf[:] = rest[length:]
    return status


def open_tls(args, ctx):
    host, port = args.proxy.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    target = "%s:%d" % (args.host, args.port)
    sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head, rest = read_head(sock, bytearray())
    if not head.startswith(b"HTTP/1.1 200") or rest:
        raise Failed("CONNECT: %r" % head[:80])
    return ctx.wrap_socket(sock, server_hostname=args.host)


def worker(args, ctx, deadline, counts, lock):
    request = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (args.path, args.host, args.port)).encode()
    while time.monotonic() < deadline:
        with lock:
            if counts["requests"] >= args.max:
                return
        tls = None
        try:
            tls = open_tls(args, ctx)
            buf = bytearray()
            while time.monotonic() < deadline:
                tls.sendall(request)
                status = read_response(tls, buf)
                with lock:
                    if status != 200:
                        raise Failed("status %d" % status)
                    counts["requests"] += 1
                    if counts["requests"] >= args.max:
                        return
                if args.mode == "new":
                    break
        except (OSError, ssl.SSLError, Failed, ValueError) as e:
            with lock:
                counts["errors"] += 1
                counts["first_error"] = counts["first_error"] or str(e)
            time.sleep(0.01)
        finally:
            if tls is not None:
                tls.close()


def hold(args, ctx):
    request = ("GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (args.path, args.host, args.port)).encode()
    held = []
    for _ in range(args.connections):
        tls = open_tls(args, ctx)
        tls.sendall(request)
        if read_response(tls, bytearray()) != 200:
            raise Failed("a held connection's request failed")
        held.append(tls)
    print(json.dumps({"open": len(held)}), flush=True)
    time.sleep(args.duration)
    for tls in held:
        tls.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--path", default="/")
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--mode", choices=("keepalive", "new", "hold"), default="keepalive")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--max", type=int, default=1000000)
    args = ap.parse_args()
    ctx = ssl.create_default_context(cafile=args.cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    if args.mode == "hold":
        return hold(args, ctx)
    counts = {"requests": 0, "errors": 0, "first_error": None}
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + args.duration
    threads = [threading.Thread(target=worker, args=(args, ctx, deadline, counts, lock))
               for _ in range(args.connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts["seconds"] = time.monotonic() - start
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
