"""Ask mode's costs, in the namespaces of bench/suites/compare.py.

Each measurement starts a fresh vibepit-proxy (one thread, pinned to the system-under-test
core; this script runs on the other core) with ask mode on, warms it up, and then, with N
clients (default 1000) from the load namespace:

1. opens N CONNECT tunnels that a rule allows (the baseline of the same run): the proxy's
   CPU per set-up and its RSS growth per open, idle tunnel;
2. on another fresh proxy, warmed up the same way, sends N CONNECTs that no rule allows,
   which the proxy holds: CPU per held request, and RSS growth per held request while all
   N wait; then releases them with one `POST /v1/allow-http` that covers them all: CPU per
   release (re-deciding, dialling, the 200 and the records), and the time from the POST to
   the last client's 200.

Each measurement has a proxy of its own, so that neither reuses memory the other grew; the
two go in turns of order from round to round.

CPU is the proxy's threads' time on a CPU (/proc/PID/task/*/schedstat, nanoseconds), so a
thousand requests measure well; the figures are medians of the rounds, each with the
baseline measured in the same round beside it.
Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import json
import os
import re
import resource
import selectors
import statistics
import sys
import time

from bench.lib import ROOT
from bench.lib.memory import open_fds, rss_kib
from bench.lib.peers import wait_for_listen
from bench.lib.report import publish, run_facts
from bench.lib.topology import LOAD_CPU, PORTS, PROXY_ADDR, SERVER, BenchTopology
from tests.integration.harness import netns
from tests.integration.harness.control import ControlConn

ALLOWED = "%s:%d" % (SERVER, PORTS["discard"])
HELD = "%s:%d" % (SERVER, PORTS["echo"])  # allowed only by the release


def cpu_ns(pid):
    """Time the process's threads have spent on a CPU, in nanoseconds."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def start_proxy(topo, session_dir, log):
    cfg = {"proxy-listen": [PROXY_ADDR + ":0"], "upstream-dns": [netns.DNS_ADDR],
           "allow-http": [ALLOWED], "decision-log": os.path.join(topo.tmp, "decisions.ndjson"),
           "threads": 1, "max-connections": 100000, "control-rate": 0, "ask": True,
           "ask-timeout-ms": 600000, "ask-max-per-client": 100000, "ask-max": 100000}
    path = os.path.join(topo.tmp, "vibepit-ask.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [topo.bin("vibepit-proxy"), "--config", path, "--session-dir", session_dir],
                   log=log)
    wait_for_listen(topo, p, log, r"credentials in")  # written by then
    text = topo.read_log(log)

    port = int(re.search(r"listening proxy \S+:(\d+)", text).group(1))
    m = re.search(r"listening control (127\.[\d.]+):(\d+)", text)
    conn = ControlConn.for_session(topo, topo.px, m.group(1), int(m.group(2)), session_dir)
    return p, port, conn


class Clients:
    """N connections from the load namespace, each with one CONNECT sent."""

    def __init__(self, topo, port, target, n):
        self.socks, self.replies = [], {}
        request = ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode()
        for _ in range(n):
            s = topo.connect(topo.sb, PROXY_ADDR, port, timeout=10)
            s.sendall(request)
            s.setblocking(False)
            self.socks.append(s)

    def statuses(self, timeout):
        """Wait for every connection's response head; return their status codes."""
        sel = selectors.DefaultSelector()
        for s in self.socks:
            self.replies[s] = b""
            sel.register(s, selectors.EVENT_READ)
        pending, deadline = len(self.socks), time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for key, _ in sel.select(0.5):
                data = key.fileobj.recv(4096)
                self.replies[key.fileobj] += data
                if b"\r\n\r\n" in self.replies[key.fileobj] or not data:
                    sel.unregister(key.fileobj)
                    pending -= 1
        sel.close()
        return [int(r.split(b" ", 2)[1]) if r.startswith(b"HTTP/1.1 ") else 0
                for r in self.replies.values()]

    def close(self):
        for s in self.socks:
            s.close()


def settle(pid, fds, timeout=30):
    deadline = time.monotonic() + timeout
    while open_fds(pid) > fds and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)


def warm(topo, p, port, conn):
    """Allocator arenas, code pages and the pending table's first growth, so that they are
    not charged to the measured requests. The same for both measurements."""
    for target in (ALLOWED, "%s:%d" % (SERVER, PORTS["source"])):
        c = Clients(topo, port, target, 200)
        time.sleep(0.5)
        c.close()
    conn.post("/v1/ask", {"enabled": False})  # answers the held ones
    conn.post("/v1/ask", {"enabled": True})
    fds = open_fds(p.pid) + 5
    settle(p.pid, fds)


def measure_tunnels(topo, n, name):
    """A fresh proxy: CPU per allowed CONNECT set-up, RSS per open idle tunnel."""
    p, port, conn = start_proxy(topo, os.path.join(topo.tmp, name), name)
    try:
        warm(topo, p, port, conn)
        rss0, cpu0 = rss_kib(p.pid), cpu_ns(p.pid)
        c = Clients(topo, port, ALLOWED, n)
        codes = c.statuses(60)
        cpu1, rss1 = cpu_ns(p.pid), rss_kib(p.pid)
        c.close()
        if codes.count(200) != n:
            raise RuntimeError("allowed CONNECTs: %d of %d got 200" % (codes.count(200), n))
        return {"tunnel_kib": (rss1 - rss0) / n, "setup_us": (cpu1 - cpu0) / n / 1e3}
    finally:
        conn.close()
        topo.stop_process(p)


def measure_held(topo, n, name):
    """A fresh proxy: CPU and RSS per held CONNECT, then CPU per release and the time from
    the covering POST to the last 200."""
    p, port, conn = start_proxy(topo, os.path.join(topo.tmp, name), name)
    try:
        warm(topo, p, port, conn)
        rss0, cpu0 = rss_kib(p.pid), cpu_ns(p.pid)
        held = Clients(topo, port, HELD, n)
        time.sleep(1.0)  # every CONNECT read and held (checked below, after the reading)
        cpu1, rss1 = cpu_ns(p.pid), rss_kib(p.pid)
        waiting = len(conn.request("GET", "/v1/pending").json()["pending"])
        if waiting != n:
            raise RuntimeError("%d of %d CONNECTs held" % (waiting, n))
        cpu2, t0 = cpu_ns(p.pid), time.perf_counter()
        r = conn.post("/v1/allow-http", {"entries": [HELD]})
        if r.status != 200:
            raise RuntimeError("allow-http: %r" % r)
        codes = held.statuses(60)
        t1, cpu3 = time.perf_counter(), cpu_ns(p.pid)
        held.close()
        if codes.count(200) != n:
            raise RuntimeError("released CONNECTs: %d of %d got 200" % (codes.count(200), n))
        return {"held_kib": (rss1 - rss0) / n, "hold_us": (cpu1 - cpu0) / n / 1e3,
                "release_us": (cpu3 - cpu2) / n / 1e3, "release_all_ms": (t1 - t0) * 1e3}
    finally:
        conn.close()
        topo.stop_process(p)


def one_round(topo, n, i):
    """Both measurements, each on a proxy of its own, in turns of order."""
    first, second = (measure_held, measure_tunnels) if i % 2 == 0 else (measure_tunnels, measure_held)
    r = first(topo, n, "vibepit-%d-a" % i)
    r.update(second(topo, n, "vibepit-%d-b" % i))
    return r


def render(res):
    m = {k: statistics.median(r[k] for r in res["rounds"]) for k in res["rounds"][0]}
    n = res["n"]

    def span(k, fmt):
        vals = [r[k] for r in res["rounds"]]
        return (fmt + "–" + fmt) % (min(vals), max(vals))
    return [
        "Run: %s, %s, proxy (one thread) on one pinned core and the clients on the other, "
        "%d held and %d allowed CONNECTs per round, %d rounds; medians, with the rounds' range."
        % (res["when"], res["machine"], n, n, len(res["rounds"])),
        "",
        "| measurement | result | baseline in the same run | ratio |",
        "|---|---|---|---|",
        "| proxy RSS per held CONNECT (%d held) | %.2f KiB (%s) | %.2f KiB per open idle tunnel "
        "(%s) | %.2f× |" % (n, m["held_kib"], span("held_kib", "%.2f"), m["tunnel_kib"],
                            span("tunnel_kib", "%.2f"), m["held_kib"] / m["tunnel_kib"]),
        "| proxy CPU to hold a CONNECT (accept, parse, decide, hold, record) | %.1f µs (%s) | "
        "%.1f µs per allowed CONNECT set-up (%s) | %.2f× |" % (
            m["hold_us"], span("hold_us", "%.1f"), m["setup_us"], span("setup_us", "%.1f"),
            m["hold_us"] / m["setup_us"]),
        "| proxy CPU per release (wake, decide again, dial, 200, records) | %.1f µs (%s) | "
        "%.1f µs per allowed CONNECT set-up | %.2f× |" % (
            m["release_us"], span("release_us", "%.1f"), m["setup_us"],
            m["release_us"] / m["setup_us"]),
        "| one `POST /v1/allow-http` that covers all %d: to the last client's 200 | %.0f ms "
        "(%s) | | |" % (n, m["release_all_ms"], span("release_all_ms", "%.0f")),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--held", type=int, default=1000, help="held (and allowed) CONNECTs per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-ask.json"))
    ap.add_argument("--markdown", help="write the table into this file's block \"ask\"")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench ask: needs root (network namespaces)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {LOAD_CPU})
    netns.install_signal_cleanup()
    res = {**run_facts(), "n": args.held,
           "rounds": []}
    with BenchTopology(args.bin_dir, pin=True) as topo:
        for i in range(args.rounds):
            r = one_round(topo, args.held, i)
            print("bench ask: round %d: %s" % (i + 1, json.dumps({k: round(v, 2) for k, v in r.items()})),
                  flush=True)
            res["rounds"].append(r)
    publish(res, render(res), args.json, args.markdown, "ask", "python3 -m bench.suites.ask")


if __name__ == "__main__":
    main()
