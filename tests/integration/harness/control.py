"""Control-API helpers: certificates made with the openssl CLI, and a small HTTPS client.

A test that needs certificates the session CA would never sign (expired, from another CA)
makes its own CA with `openssl`, hands the server's set to vibepit-proxy over
--credentials-fd (as the launcher does), and keeps the CA to mint whatever it needs.
"""

import json
import os
import socket
import ssl
import subprocess

from .netns import in_netns
from .tools import need


def _openssl(*args, cwd):
    r = subprocess.run([need("openssl")] + list(args), cwd=cwd, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("openssl %s: %s" % (" ".join(args), r.stderr.strip()))
    return r.stdout


class TestCa:
    """An Ed25519 CA in a directory, minting leaf certificates on request."""

    def __init__(self, directory, name="test-ca"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.key = os.path.join(directory, name + ".key")
        self.cert = os.path.join(directory, name + ".pem")
        _openssl("genpkey", "-algorithm", "ed25519", "-out", self.key, cwd=directory)
        _openssl("req", "-x509", "-new", "-key", self.key, "-subj", "/CN=" + name, "-days", "2",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign", "-out", self.cert, cwd=directory)
        self.n = 0

    def issue(self, name, usage, san=None, days=1):
        """A leaf: usage "serverAuth" or "clientAuth"; days=-1 makes an expired one."""
        self.n += 1
        key = os.path.join(self.dir, "%s.key" % name)
        csr = os.path.join(self.dir, "%s.csr" % name)
        cert = os.path.join(self.dir, "%s.pem" % name)
        ext = os.path.join(self.dir, "%s.ext" % name)
        with open(ext, "w") as f:
            f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=%s\n" % usage)
            if san:
                f.write("subjectAltName=%s\n" % san)
        _openssl("genpkey", "-algorithm", "ed25519", "-out", key, cwd=self.dir)
        _openssl("req", "-new", "-key", key, "-subj", "/CN=" + name, "-out", csr, cwd=self.dir)
        _openssl("x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
                 "-set_serial", str(1000 + self.n), "-days", str(days), "-extfile", ext,
                 "-out", cert, cwd=self.dir)
        return cert, key

    def server_set_json(self, cert, key):
        with open(self.cert) as f:
            ca = f.read()
        with open(cert) as f:
            c = f.read()
        with open(key) as f:
            k = f.read()
        return json.dumps({"ca": ca, "cert": c, "key": k})


def credentials_pipe(text):
    """A pipe whose read end holds `text` (small enough for the pipe buffer); returns that fd."""
    r, w = os.pipe()
    os.write(w, text.encode())
    os.close(w)
    return r


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "Response(%d, %r)" % (self.status, self.body[:300])


class ControlConn:
    """One mutual-TLS keep-alive connection to the control API, made inside namespace ns."""

    def __init__(self, topo, ns, host, port, ca, cert, key, timeout=10.0):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_verify_locations(ca)
        ctx.load_cert_chain(cert, key)
        ctx.check_hostname = False  # the CA is pinned; the IP SAN is checked by the CLI tests
        raw = in_netns(ns, socket.socket, socket.AF_INET, socket.SOCK_STREAM)
        raw.settimeout(timeout)
        raw.connect((host, port))
        self.sock = ctx.wrap_socket(raw)
        self.buf = b""

    @classmethod
    def for_session(cls, topo, ns, host, port, session_dir, timeout=10.0):
        j = lambda f: os.path.join(session_dir, f)
        return cls(topo, ns, host, port, j("ca.pem"), j("client.pem"), j("client-key.pem"), timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def request(self, method, path, body=None, headers=None):
        data = b"" if body is None else (body if isinstance(body, bytes) else body.encode())
        head = "%s %s HTTP/1.1\r\nHost: control\r\n" % (method, path)
        for k, v in (headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        if body is not None:
            head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
        self.sock.sendall(head.encode() + b"\r\n" + data)
        return self.read_response()

    def post(self, path, obj):
        return self.request("POST", path, json.dumps(obj))

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("control API closed the connection")
        self.buf += chunk

    def read_response(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return Response(status, headers, body.decode("utf-8", "replace"))
