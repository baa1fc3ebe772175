"""The soak's parts (bench.suites.soak runs them): its topology, with a zone of its own on
the authoritative server; the loads, each a thread at a fixed offered rate; and the fault
events. Soak mixes SoakLoads and SoakFaults into one object that holds the proxy (proxy,
port, control, log_path), the counts and the errors (add, fail)."""

import json
import os
import re
import signal
import socket
import struct
import threading
import time

from bench.lib.dns import AUTH_ADDR, LOST_RE, RCODES_RE, DnsTopology, dnsperf
from bench.lib.topology import PORTS, PROXY_ADDR, BenchTopology
from bench.lib.workloads import bench
from tests.integration.harness.client import RawConn
from tests.integration.harness.fake_dns import build_query

PROXY = PROXY_ADDR
HOST = "www.soak.test"
DENIED_TARGETS = ["d%d.denied.test:443", "10.0.0.1:443", HOST + ":25", "%d.rules.test:8443"]
RATES = {"churn": 400, "http": 1500, "dns": 800}     # per second, before --scale


def udp_counters(topo, ns):
    """The namespace's UDP drop counters (nstat): where a lost datagram was dropped."""
    out = topo.run(ns, ["nstat", "-az"], timeout=10).stdout.decode()
    keys = ("UdpRcvbufErrors", "UdpSndbufErrors", "UdpInErrors")
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)", out, re.M) if k in keys}


class SoakLoads:
    """The loads: each runs in a thread of its own until the phase's end."""

    def bench(self, argv, timeout):
        return bench(self.topo, argv, timeout)

    def loop(self, name, end, fn):
        """Run fn(seconds) in turns of at most 10 s until `end`; record what went wrong."""
        def run():
            while not self.stop.is_set():
                left = end - time.monotonic()
                if left < 1:
                    return
                try:
                    fn(min(10.0, left))
                except Exception as e:      # noqa: BLE001 - reported as a soak error
                    self.fail("%s: %r" % (name, e), traffic=True)
                    time.sleep(1)
        th = threading.Thread(target=run, name=name, daemon=True)
        th.start()
        return th

    def churn(self, secs):
        rate = max(1, int(RATES["churn"] * self.args.scale))
        r = self.bench(["connect-rate", "--proxy", self.proxy, "--target", "%s:%d" % (HOST, PORTS["echo"]),
                        "--rate", str(rate), "--concurrency", "16", "--duration", "%.1f" % secs],
                       secs + 60)
        self.add("churn_tunnels", r["results"]["tunnels"])
        if r["errors"]["total"]:
            self.fail("churn: %s" % r["errors"], traffic=True)

    def bulk(self, secs):
        direction = "up" if self.counts.get("bulk_runs", 0) % 2 else "down"
        target = "%s:%d" % (HOST, PORTS["discard" if direction == "up" else "source"])
        r = self.bench(["connect-throughput", "--proxy", self.proxy, "--target", target, "--streams", "1",
                        "--duration", "%.1f" % min(2.0, secs), "--direction", direction], secs + 60)
        self.add("bulk_runs")
        self.add("bulk_bytes", int(r["results"].get("bytes", 0)))
        if r["errors"]["total"]:
            self.fail("bulk %s: %s" % (direction, json.dumps(r)[:1500]), traffic=True)
        time.sleep(max(0.0, secs - 2.0))

    def http(self, secs):
        rate = max(1, int(RATES["http"] * self.args.scale))
        r = self.bench(["http-rps", "--proxy", self.proxy, "--url", "http://%s:%d/" % (HOST, PORTS["http"]),
                        "--connections", "4", "--rate", str(rate), "--duration", "%.1f" % secs], secs + 60)
        self.add("http_requests", r["results"]["requests"])
        if r["errors"]["total"] or r["results"]["non200"]:
            self.fail("http: %s, %d not 200" % (r["errors"], r["results"]["non200"]), traffic=True)

    def dns(self, stream, secs):
        rate = max(1, int(RATES["dns"] * self.args.scale))
        out = dnsperf(self.topo, self.streams[stream], int(max(1, secs)),
                      ["-Q", str(rate)] + (["-n", "1"] if stream == "miss" else []), secs + 60)
        sent = re.search(r"Queries sent:\s+(\d+)", out)
        lost = LOST_RE.search(out)
        codes = RCODES_RE.search(out)
        if not sent:
            raise RuntimeError("dnsperf: " + out[-800:])
        self.add("dns_%s_sent" % stream, int(sent.group(1)))
        codes = dict((name, int(n)) for name, n in re.findall(r"(\w+) (\d+) \(", codes.group(1) if codes else ""))
        want = "REFUSED" if stream == "denied" else "NOERROR"
        other = {k: v for k, v in codes.items() if k != want}
        if other:
            self.fail("dns %s: answers other than %s: %s" % (stream, want, other), traffic=True)
        if stream != "denied" and lost and int(lost.group(1)):
            self.fail("dns %s: %s queries lost" % (stream, lost.group(1)), traffic=True)

    def denied(self, end):
        def run():
            i = 0
            while not self.stop.is_set() and time.monotonic() < end:
                target = DENIED_TARGETS[i % len(DENIED_TARGETS)]
                target = target % i if "%d" in target else target
                try:
                    c = SandboxConn(self.topo, self.port)
                    resp = c.request("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target), "CONNECT")
                    c.close()
                    self.add("denied_requests")
                    if resp.status != 403:
                        self.fail("denied %s answered %d" % (target, resp.status))
                except Exception as e:      # noqa: BLE001
                    self.fail("denied %s: %r" % (target, e))
                i += 1
                time.sleep(0.2)
        th = threading.Thread(target=run, name="denied", daemon=True)
        th.start()
        return th

    def rules(self, end):
        def run():
            while not self.stop.is_set() and time.monotonic() < end:
                n = self.counts.get("rules_added", 0)
                try:
                    with self.control_lock:
                        r = self.control.post("/v1/allow-http", {"entries": ["r%d.rules.test:443" % n]})
                    if r.status != 200:
                        self.fail("allow-http answered %d: %s" % (r.status, r.body[:200]))
                    self.add("rules_added")
                except Exception as e:      # noqa: BLE001
                    self.fail("allow-http: %r" % e)
                time.sleep(1)
        th = threading.Thread(target=run, name="rules", daemon=True)
        th.start()
        return th


class SoakFaults:
    """The fault events, one every --fault-every seconds, in turn."""

    def sb_connect(self, port, timeout=5):
        return self.topo.connect(self.topo.sb, PROXY, port, timeout=timeout)

    def fault_rotate(self):
        self.rotations += 1
        os.rename(self.log_path, "%s.soak-%d" % (self.log_path, self.rotations))
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while not os.path.exists(self.log_path):
            if time.monotonic() > deadline:
                raise RuntimeError("no new decision log 5 s after SIGHUP")
            time.sleep(0.05)

    def fault_resets(self):
        socks = []
        try:
            for _ in range(20):
                s = self.sb_connect(self.port)
                socks.append(s)
                t = "%s:%d" % (HOST, PORTS["source"])
                s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
            for s in socks:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = s.recv(4096)
                    if not chunk:
                        raise RuntimeError("tunnel closed before its 200")
                    head += chunk
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError("tunnel refused: %r" % head[:100])
                s.recv(65536)       # the download has started
        finally:
            for s in socks:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()

    def fault_slow(self):
        socks = []
        try:
            for _ in range(50):
                s = self.sb_connect(self.port)
                s.sendall(b"GET http://%s:%d/ HTTP/1.1\r\nHost: " % (HOST.encode(), PORTS["http"]))
                socks.append(s)
            deadline = time.monotonic() + 6        # header-timeout-ms 2000
            for s in socks:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    data = s.recv(4096)
                except socket.timeout:
                    raise RuntimeError("a stalled head was not closed within 6 s")
                except ConnectionResetError:
                    data = b""
                if data and not data.startswith(b"HTTP/1.1 408"):
                    raise RuntimeError("stalled head answered %r" % data[:60])
        finally:
            for s in socks:
                s.close()

    def fault_dnsjunk(self):
        u = self.topo.socket(self.topo.sb, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for i in range(300):
                junk = [b"\x00", b"\xff" * 12, build_query("junk.test", 1)[:-3],
                        build_query("x" * 70 + ".cached.test", 1)][i % 4]
                u.sendto(junk, (PROXY, 53))
                # Paced: 300 datagrams at once would overflow the socket's receive buffer,
                # and the kernel would drop the stream's queries with them, as in any flood.
                time.sleep(0.001)
        finally:
            u.close()
        held = [self.sb_connect(53) for _ in range(20)]
        for s in held:
            s.sendall(b"\xff\xff\x00")
        time.sleep(0.5)
        for s in held:
            s.close()
        # the server still answers
        q = self.topo.socket(self.topo.sb, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            q.settimeout(3)
            q.sendto(build_query("c1.cached.test", 1, qid=0x5151), (PROXY, 53))
            reply = q.recv(4096)
            if reply[:2] != b"\x51\x51" or reply[3] & 0xF != 0:
                raise RuntimeError("no NOERROR answer after the junk: %r" % reply[:12])
        finally:
            q.close()

    def fault_flood(self):
        socks = []
        try:
            for i in range(300):
                s = self.sb_connect(self.port)
                t = "f%d.flood.test:443" % i
                s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t)).encode())
                socks.append(s)
            for s in socks:
                s.settimeout(5)
                data = s.recv(4096)
                if not data.startswith(b"HTTP/1.1 403"):
                    raise RuntimeError("flood CONNECT answered %r" % data[:60])
                self.add("denied_requests")
        finally:
            for s in socks:
                s.close()

    FAULTS = ("rotate", "resets", "slow", "dnsjunk", "flood")

    def fault_events(self, end):
        events = [(name, getattr(self, "fault_" + name)) for name in self.FAULTS]

        def run():
            i = 0
            while not self.stop.wait(self.args.fault_every) and time.monotonic() < end - 2:
                name, fn = events[i % len(events)]
                t0 = time.monotonic()
                try:
                    fn()
                    ok = True
                except Exception as e:      # noqa: BLE001
                    self.fail("fault %s: %r" % (name, e))
                    ok = False
                with self.lock:
                    self.faults.append({"event": name, "ok": ok, "s": round(time.monotonic() - t0, 2)})
                i += 1
        th = threading.Thread(target=run, name="faults", daemon=True)
        th.start()
        return th


class SandboxConn(RawConn):
    """A client connection from "sb", where the load runs, to the proxy."""

    def __init__(self, topo, port, timeout=5.0):   # noqa: super().__init__ connects from px
        self.sock = topo.connect(topo.sb, PROXY, port, timeout=timeout)
        self.buf = b""


class SoakTopology(DnsTopology):
    """The DNS benchmark's topology (DnsTopology), with the soak's own zone on the authoritative server."""

    def _start_fakes(self):
        BenchTopology._start_fakes(self)
        self.run(self.net, ["ip", "addr", "add", AUTH_ADDR + "/32", "dev", "lo"])
        self.popen(self.net, [self.bin("vibepit-bench"), "dns-auth", "--listen", AUTH_ADDR + ":53",
                              "--zone", "cached.test:3600", "--zone", "miss.test:0", "--zone", "soak.test:300",
                              "--threads", "1", "--duration", "7200"], log="dns-auth")
        time.sleep(0.3)
