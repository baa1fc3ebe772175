#!/usr/bin/env python3
"""Record the first TLS flight of real clients, for the ClientHello parser's table tests.

Each client connects to a listener on 127.0.0.1 that reads the TLS records of its
ClientHello, writes them to NAME.bin beside this script, and hangs up (the handshake then
fails, which is expected). Run again to refresh the files after a client upgrade:

    python3 tests/unit/tls/client_hellos/record.py [NAME ...]

Needs curl, openssl, go, node and python3. Nothing leaves 127.0.0.1.
"""

import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

GO_CLIENT = r"""
package main

import (
    "crypto/tls"
    "os"
)

func main() {
    c, err := tls.Dial("tcp", os.Args[1], &tls.Config{ServerName: os.Args[2],
        NextProtos: []string{"h2", "http/1.1"}})
    if err == nil {
        c.Close()
    }
}
"""

NODE_CLIENT = r"""
const tls = require('tls');
const [port, name] = process.argv.slice(-2);
const s = tls.connect({host: '127.0.0.1', port: Number(port), servername: name,
                       ALPNProtocols: ['http/1.1']});
s.on('error', () => {});
"""


def python_client(port, name):
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=name):
                pass
        except (ssl.SSLError, OSError):
            pass


def python_no_sni(port, _name):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=None):
                pass
        except (ssl.SSLError, OSError):
            pass


def command(argv):
    def run(port, name):
        args = [a.replace("{port}", str(port)).replace("{name}", name or "") for a in argv]
        subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=20, check=False)
    return run


def go_client(workdir):
    src = os.path.join(workdir, "client.go")
    with open(src, "w") as f:
        f.write(GO_CLIENT)
    exe = os.path.join(workdir, "client")
    env = dict(os.environ, GOCACHE=os.path.join(workdir, "cache"), GOPATH=workdir,
               GOFLAGS="-mod=mod", GO111MODULE="off")
    subprocess.run(["go", "build", "-o", exe, src], check=True, env=env, cwd=workdir)
    return command([exe, "127.0.0.1:{port}", "{name}"])


def read_hello(conn):
    """The records that carry one ClientHello: record headers and all, as sent."""
    data = b""
    handshake = b""
    while True:
        while len(data) < 5 or len(data) < 5 + int.from_bytes(data[3:5], "big"):
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        # One more record: take its payload, and stop once the message is whole.
        handshake = b""
        pos = 0
        while pos + 5 <= len(data):
            n = int.from_bytes(data[pos + 3:pos + 5], "big")
            handshake += data[pos + 5:pos + 5 + n]
            pos += 5 + n
        if len(handshake) >= 4 and len(handshake) >= 4 + int.from_bytes(handshake[1:4], "big"):
            return data[:pos]
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk


def record(name, client, sni):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        srv.settimeout(30)
        port = srv.getsockname()[1]
        t = threading.Thread(target=client, args=(port, sni), daemon=True)
        t.start()
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(10)
            hello = read_hello(conn)
        t.join(30)
    with open(os.path.join(HERE, name + ".bin"), "wb") as f:
        f.write(hello)
    print(f"{name}.bin: {len(hello)} bytes, SNI {sni or '(none)'}")


def main():
    with tempfile.TemporaryDirectory() as work:
        clients = {
            "curl": (command(["curl", "-s", "-k", "--max-time", "5", "--resolve",
                              "{name}:{port}:127.0.0.1", "https://{name}:{port}/"]),
                     "curl.sni.test"),
            "openssl": (command(["openssl", "s_client", "-connect", "127.0.0.1:{port}",
                                 "-servername", "{name}", "-alpn", "http/1.1"]),
                        "openssl.sni.test"),
            "openssl-tls12": (command(["openssl", "s_client", "-tls1_2", "-connect",
                                       "127.0.0.1:{port}", "-servername", "{name}"]),
                              "tls12.sni.test"),
            "openssl-no-sni": (command(["openssl", "s_client", "-connect", "127.0.0.1:{port}",
                                        "-noservername"]), None),
            "go": (None, "go.sni.test"),
            "node": (command(["node", "-e", NODE_CLIENT, "{port}", "{name}"]),
                     "node.sni.test"),
            "python": (python_client, "python.sni.test"),
            "python-no-sni": (python_no_sni, None),
        }
        wanted = sys.argv[1:] or list(clients)
        for name in wanted:
            client, sni = clients[name]
            if name == "go":
                client = go_client(work)
            record(name, client, sni)


if __name__ == "__main__":
    main()
