"""Clients for the tests: real curl inside px, and a raw socket HTTP client.

The raw client exists for what curl will not send (smuggling attempts,
malformed heads) and to read bodies of refused CONNECTs.
"""

import hashlib
import json
import os
import socket
import struct
import threading
import time

from . import fake_upstream
from .wait import LIVENESS_S


class BodyMixin:
    """`text` and `json()` views of a `body` in bytes."""

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)


class Response(BodyMixin):
    def __init__(self, status_line, headers, body):
        self.status_line = status_line
        parts = status_line.split(" ", 2)
        self.version = parts[0]
        self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = headers            # [(name, value)]
        self.body = body                  # bytes

    def header(self, name):
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        return vals[0] if vals else None

    def __repr__(self):
        return "<Response %r body=%r>" % (self.status_line, self.body[:300])


class Closed(Exception):
    """The peer closed (or reset) before a complete response head arrived."""


class RawConn:
    """One TCP connection from px to the proxy (or anything in px)."""

    def __init__(self, topo, port, host="127.0.0.1", timeout=LIVENESS_S):
        self.sock = topo.connect(topo.px, host, port, timeout=timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def _fill(self):
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed("connection closed; got %r" % self.buf[:200])
        self.buf += chunk

    def _take_line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _take(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, request_method="GET"):
        """Read one response. 2xx to CONNECT has no body (the tunnel follows)."""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = []
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers.append((k.strip(), v.strip()))
        resp = Response(lines[0], headers, b"")
        if (request_method == "CONNECT" and 200 <= resp.status < 300) or request_method == "HEAD" \
                or resp.status in (204, 304) or 100 <= resp.status < 200:
            return resp
        te = resp.header("transfer-encoding")
        cl = resp.header("content-length")
        if te and "chunked" in te.lower():
            body = b""
            while True:
                size = int(self._take_line().split(b";")[0], 16)
                if size == 0:
                    while self._take_line():
                        pass
                    break
                body += self._take(size)
                self._take_line()
            resp.body = body
        elif cl is not None:
            resp.body = self._take(int(cl))
        else:
            resp.body = self.read_to_eof()
        return resp

    def read_to_eof(self, timeout=None):
        if timeout is not None:
            self.sock.settimeout(timeout)
        out, self.buf = self.buf, b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out

    def recv_exact(self, n):
        return self._take(n)

    def request(self, data, method=None):
        self.send(data)
        if method is None:
            text = data if isinstance(data, str) else data.decode("latin-1")
            method = text.split(" ", 1)[0]
        return self.read_response(method)

    def closed_by_peer(self, timeout=3.0):
        """True if the peer closes (EOF or RST) within timeout; pending data is discarded."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False


def connect_tunnel(topo, port, target, timeout=LIVENESS_S, extra_headers=""):
    """CONNECT target through the proxy; returns (RawConn, Response)."""
    c = RawConn(topo, port, timeout=timeout)
    resp = c.request("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (target, target, extra_headers),
                     "CONNECT")
    return c, resp


# ------------------------------------------------------------------ curl

class CurlResult(BodyMixin):
    def __init__(self, proc, body, headers_text):
        self.rc = proc.returncode
        self.stderr = proc.stderr.decode("utf-8", "replace")
        self.body = body
        self.headers_text = headers_text
        # one "@@W http connect num_connects" line per URL (later bodies also land on stdout)
        self.transfers = [tuple(int(x) for x in ln.split()[1:4])
                          for ln in proc.stdout.decode("latin-1").splitlines() if ln.startswith("@@W ")]
        first = self.transfers[0] if self.transfers else (0, 0, -1)
        self.http_code, self.connect_code, self.num_connects = first
        self.stdout = proc.stdout

    def __repr__(self):
        return "<curl rc=%d http=%d connect=%d stderr=%r body=%r>" % (
            self.rc, self.http_code, self.connect_code, self.stderr[-500:], self.body[:300])


_curl_n = [0]


def curl(topo, args, proxy_port=None, tunnel=False, timeout=10.0):
    """Run curl inside px. Body and headers go to files; -w gives the codes."""
    _curl_n[0] += 1
    body_path = os.path.join(topo.tmp, "curl-%d.body" % _curl_n[0])
    head_path = os.path.join(topo.tmp, "curl-%d.head" % _curl_n[0])
    argv = ["curl", "-q", "-sS", "--max-time", str(timeout), "-o", body_path, "-D", head_path,
            "-w", "\\n@@W %{http_code} %{http_connect} %{num_connects}\\n"]
    if proxy_port is not None:
        argv += ["-x", "http://127.0.0.1:%d" % proxy_port]
    if tunnel:
        argv.append("-p")
    proc = topo.run(topo.px, argv + list(args), timeout=timeout + 5)
    body = headers = b""
    if os.path.exists(body_path):
        with open(body_path, "rb") as f:
            body = f.read()
        os.unlink(body_path)
    if os.path.exists(head_path):
        with open(head_path, "rb") as f:
            headers = f.read().decode("latin-1")
        os.unlink(head_path)
    return CurlResult(proc, body, headers)


# ------------------------------------------------------------------ bulk

def bulk_transfer(sock, n_down, n_up, seed=1, until_eof=False, chunk=1 << 20):
    """Drive the fake bulk protocol over a connected socket (tunnel).

    Sends n_up pattern bytes while reading n_down, then checks the server's
    trailer. Returns dict with ok flags and digests; raises on I/O errors.
    """
    header = fake_upstream.BULK_HEADER.pack(
        fake_upstream.BULK_MAGIC, n_down, fake_upstream.BULK_UNTIL_EOF if until_eof else n_up, seed)
    up_seed = seed + 1000
    errors = []
    sent_digest = hashlib.sha256()

    def sender():
        try:
            sock.sendall(header)
            for c in fake_upstream.pattern_chunks(up_seed, n_up):
                sent_digest.update(c)
                sock.sendall(c)
            if until_eof:
                sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            errors.append(e)
    t = threading.Thread(target=sender, daemon=True)
    t.start()
    h, got = hashlib.sha256(), 0
    while got < n_down:
        data = sock.recv(min(chunk, n_down - got))
        if not data:
            break
        h.update(data)
        got += len(data)
    trailer = b""
    while len(trailer) < 40:
        data = sock.recv(40 - len(trailer))
        if not data:
            break
        trailer += data
    t.join(60)
    if errors:
        raise errors[0]
    result = {"down_bytes": got, "down_sha256": h.hexdigest(),
              "down_expected": fake_upstream.pattern_sha256(seed, n_down),
              "up_sent_sha256": sent_digest.hexdigest(), "trailer_len": len(trailer)}
    if len(trailer) == 40:
        (n,) = struct.unpack("!Q", trailer[:8])
        result["up_bytes_seen"] = n
        result["up_sha256_seen"] = trailer[8:].hex()
    result["ok"] = (got == n_down and result["down_sha256"] == result["down_expected"]
                    and result.get("up_bytes_seen") == n_up
                    and result.get("up_sha256_seen") == result["up_sent_sha256"])
    return result
