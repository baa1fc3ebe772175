#!/usr/bin/env python3
"""Side-by-side proxy benchmark in network namespaces, all in one run.

Topology: the load generator runs in its own namespace "sb", as the agent does in its own
container. It reaches namespace "px", which holds the proxy under test, over a veth pair
(sb 192.0.2.2, px 192.0.2.1). Namespace "net" is the fake internet
(tests/integration/harness/netns.py): `vibepit-bench serve` listens on 198.51.100.10 and a
fake DNS server answers allowed.test -> 198.51.100.10. With no proxy (the ceiling), px
forwards the packets as a router would; with a proxy, px terminates both connections.
Every byte crosses both veth pairs either way.

Measured for each of: no proxy (the ceiling), vibepit-proxy, squid, tinyproxy, each with
the same allowlist (allowed.test, any port):
  - CONNECT bulk throughput (4 tunnels, download)
  - CONNECT setup rate (short tunnels at concurrency 32) with latency percentiles
  - keep-alive plain-HTTP requests per second (32 connections)
and for vibepit-proxy alone: memory per idle tunnel with 10 000 open tunnels, and the
matcher microbenchmark at 10 and 100 000 rules, side by side in rounds. Results go to a
JSON file and to the table in docs/benchmarks.md.

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

from bench import cpu
from tests.integration.harness import netns
from tests.integration.harness.tools import need

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SERVER = "198.51.100.10"
SB_ADDR, PROXY_ADDR = "192.0.2.2", "192.0.2.1"  # RFC 5737 TEST-NET-1, inside our namespaces
PORTS = {"discard": 9001, "source": 9002, "echo": 9003, "http": 8080}
# haproxy, the relay floor, listens on px for each of PORTS at RELAY_BASE + its index and
# forwards to SERVER at that port: a plain TCP relay, no CONNECT. Below the ephemeral range.
# A second instance (bench/tail.py's A/A column) takes the next RELAY_STRIDE ports.
RELAY_BASE, RELAY_STRIDE = 4001, 10
SUT_CPU, LOAD_CPU = 1, 0


class BenchTopology(netns.Topology):
    """The test topology, with vibepit-bench servers instead of the Python fakes."""

    def __init__(self, bin_dir, pin=False):
        super().__init__(ipv6=False)
        # Children run in the topology's temp directory: a relative --bin-dir must not
        # resolve there.
        self.bin_dir = os.path.abspath(bin_dir)
        # pin: the system under test (whatever runs in px) on one core, the load generator and
        # the servers (sb, net) on another, so that neither can take the other's core and each
        # system is judged on one core. Needs two cores.
        self.cpus = None
        if pin:
            if (os.cpu_count() or 1) < 2:
                raise RuntimeError("pinning needs two cores; this machine has %s" % os.cpu_count())
            self.cpus = {"sut": SUT_CPU, "load": LOAD_CPU}

    def _pinned(self, ns, argv):
        if not self.cpus:
            return list(argv)
        need(argv[0])
        core = self.cpus["sut"] if ns == self.px else self.cpus["load"]
        return ["taskset", "-c", str(core)] + list(argv)

    def popen(self, ns, argv, **kw):
        return super().popen(ns, self._pinned(ns, argv), **kw)

    def run(self, ns, argv, **kw):
        return super().run(ns, self._pinned(ns, argv), **kw)

    def _create_network(self):
        super()._create_network()
        # The client namespace, as a sandbox container is: its only neighbour is px.
        self.sb = self.px[:-2] + "sb"
        self.extra_ns.append(self.sb)
        ip = lambda *a: self.run_ip(*a)
        ip("netns", "add", self.sb)
        ip("-n", self.sb, "link", "set", "lo", "up")
        ip("link", "add", "vs0", "netns", self.sb, "type", "veth", "peer", "name", "vp1", "netns", self.px)
        ip("-n", self.sb, "addr", "add", SB_ADDR + "/24", "dev", "vs0")
        ip("-n", self.px, "addr", "add", PROXY_ADDR + "/24", "dev", "vp1")
        ip("-n", self.sb, "link", "set", "vs0", "up")
        ip("-n", self.px, "link", "set", "vp1", "up")
        # The ceiling: sb reaches the fake internet through px, routed, with no proxy.
        ip("-n", self.sb, "route", "add", "198.51.100.0/24", "via", PROXY_ADDR)
        ip("-n", self.net, "route", "add", "192.0.2.0/24", "via", netns.PX_V4)
        self.run(self.px, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])

    @staticmethod
    def run_ip(*args):
        r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))

    def _start_fakes(self):
        # Peers that use the system resolver (tinyproxy) must ask our fake DNS server:
        # `ip netns exec` mounts /etc/netns/NS/resolv.conf over /etc/resolv.conf.
        self.etc_dir = os.path.join("/etc/netns", self.px)
        os.makedirs(self.etc_dir, exist_ok=True)
        with open(os.path.join(self.etc_dir, "resolv.conf"), "w") as f:
            f.write("nameserver %s\n" % netns.DNS_ADDR)
        # Short connections at tens of thousands per second would otherwise run the namespaces
        # out of ephemeral ports, held in TIME_WAIT: allow reuse and a wide port range that stays
        # clear of the peers' fixed listening ports (3128, 8888, 8080, 9001-9003).
        for ns in (self.sb, self.px, self.net):
            self.run(ns, ["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1",
                          "net.ipv4.ip_local_port_range=10000 65535"])
        py = sys.executable
        self.popen(self.net, [py, os.path.join(netns.HERE, "fake_dns.py"), "--listen",
                              netns.DNS_ADDR, "--port", "53", "--stats", self.dns_stats_path],
                   log="fake_dns")
        for kind, port in PORTS.items():
            self.popen(self.net, [self.bin("vibepit-bench"), "serve",
                                  "--listen", "%s:%d" % (SERVER, port), "--kind", kind,
                                  "--threads", "1", "--duration", "3600"],
                       log="serve-" + kind)
        deadline = time.monotonic() + 15
        while not os.path.exists(self.dns_stats_path):
            if time.monotonic() > deadline:
                raise RuntimeError("fake DNS did not start: " + self.read_log("fake_dns"))
            time.sleep(0.05)
        for port in PORTS.values():
            self.wait_port(self.sb, SERVER, port)  # also proves the routed path works

    def close(self):
        super().close()
        if getattr(self, "etc_dir", None):
            shutil.rmtree(self.etc_dir, ignore_errors=True)

    def bin(self, name):
        return os.path.join(self.bin_dir, name)

    def stop_process(self, p, sig=15, timeout=10.0):
        return super().stop_process(p, sig, timeout)


# ------------------------------------------------------------------ the proxies

def wait_for_listen(topo, proc, log, pattern, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, topo.read_log(log))
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (log, topo.read_log(log)))
        time.sleep(0.05)
    raise RuntimeError("%s did not start: %s" % (log, topo.read_log(log)))


def start_vibepit(topo, threads, binary=None, name="vibepit", wrapper=(), timeout=15):
    """vibepit-proxy from the topology's bin dir, or `binary` (another build, under its own
    `name`, beside the first); `wrapper` goes before it on the command line (valgrind)."""
    cfg = {
        "proxy-listen": [PROXY_ADDR + ":0"],
        "upstream-dns": [netns.DNS_ADDR],
        "allow-http": ["allowed.test:*"],
        "decision-log": os.path.join(topo.tmp, "decisions-%s.ndjson" % name),
        "threads": threads,
        "max-connections": 100000,
    }
    path = os.path.join(topo.tmp, "%s.json" % name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, list(wrapper) + [binary or topo.bin("vibepit-proxy"), "--config", path],
                   log=name)
    m = wait_for_listen(topo, p, name, r"listening proxy 192\.0\.2\.1:(\d+)", timeout)
    return p, "%s:%s" % (PROXY_ADDR, m.group(1))


def move_log_writer(topo, pid, who):
    """Moves vibepit-proxy `pid`'s decision-log writer (its one thread named "vp-log") to the
    load's core, so that the core under test belongs to the I/O thread alone: what sharing
    that core with the writer costs is then a column's difference. Exits if there is not
    exactly one such thread."""
    tids = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() == "vp-log":
                    tids.append(tid)
        except FileNotFoundError:
            pass  # a thread that has just ended
    if len(tids) != 1:
        sys.exit("%s: expected one vp-log thread in vibepit-proxy %d, found %d" % (who, pid, len(tids)))
    subprocess.run(["taskset", "-p", "-c", str(topo.cpus["load"]), tids[0]], check=True,
                   stdout=subprocess.DEVNULL)


def start_squid(topo):
    d = os.path.join(topo.tmp, "squid")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "squid.conf")
    with open(conf, "w") as f:
        f.write("""http_port {listen}:3128
pid_filename {d}/squid.pid
cache_effective_user proxy
cache deny all
cache_mem 8 MB
access_log stdio:{d}/access.log
cache_log {d}/cache.log
cache_store_log none
coredump_dir {d}
hosts_file none
dns_nameservers {dns}
max_filedescriptors 65536
shutdown_lifetime 1 seconds
acl allowed dstdomain allowed.test
acl CONNECT method CONNECT
http_access allow allowed
http_access deny all
""".format(d=d, dns=netns.DNS_ADDR, listen=PROXY_ADDR))
    shutil.chown(d, "proxy")
    os.chmod(topo.tmp, 0o755)  # squid runs as "proxy" and must reach its directory
    p = topo.popen(topo.px, ["squid", "-N", "-f", conf], log="squid")
    topo.wait_port(topo.px, PROXY_ADDR, 3128, timeout=20)
    return p, via_proxy(PROXY_ADDR + ":3128", p.pid)


def start_tinyproxy(topo):
    d = os.path.join(topo.tmp, "tinyproxy")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "filter"), "w") as f:
        f.write("^allowed\\.test$\n")
    conf = os.path.join(d, "tinyproxy.conf")
    with open(conf, "w") as f:
        f.write("""Port 8888
Listen {listen}
Timeout 600
MaxClients 1000
Allow {client}
Filter "{d}/filter"
FilterDefaultDeny Yes
FilterURLs Off
FilterExtended On
LogLevel Warning
LogFile "{d}/tinyproxy.log"
PidFile "{d}/tinyproxy.pid"
""".format(d=d, listen=PROXY_ADDR, client=SB_ADDR))
    os.chmod(d, 0o777)
    os.chmod(topo.tmp, 0o755)
    p = topo.popen(topo.px, ["tinyproxy", "-d", "-c", conf], log="tinyproxy")
    topo.wait_port(topo.px, PROXY_ADDR, 8888, timeout=20)
    return p, via_proxy(PROXY_ADDR + ":8888", p.pid)


def start_haproxy(topo, instance=0, wrapper=(), timeout=20):
    """haproxy as the relay floor: one thread, plain TCP, one frontend per server port,
    splicing both ways (forced: see below). It parses nothing and decides nothing, so no proxy can do less work
    per byte or per connection. Instances 1, 2, ... are further copies on ports of their own.
    `wrapper` goes before it on the command line (valgrind)."""
    name = "haproxy" if instance == 0 else "haproxy-%d" % instance
    d = os.path.join(topo.tmp, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "haproxy.cfg")
    # haproxy refuses to start unless the open-file limit covers what maxconn can need (two
    # descriptors per connection, and pipes for splicing): stay well inside it.
    maxconn = (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 1000) // 3
    # splice-auto did not splice here (strace: one recv and one send per 16 KiB, 61 606 of
    # each per GB): splicing is forced both ways, through pipes as large as vibepit-proxy's.
    lines = ["global", "  nbthread 1", "  maxconn %d" % maxconn, "  pidfile %s/haproxy.pid" % d,
             "  tune.pipesize 262144",
             "defaults", "  mode tcp", "  option splice-request", "  option splice-response",
             "  timeout connect 5s",
             "  timeout client 600s", "  timeout server 600s", "  maxconn %d" % maxconn]
    relay = {}
    for i, (kind, port) in enumerate(sorted(PORTS.items())):
        relay[kind] = RELAY_BASE + instance * RELAY_STRIDE + i
        lines += ["listen relay_%s" % kind, "  bind %s:%d" % (PROXY_ADDR, relay[kind]),
                  "  server upstream %s:%d" % (SERVER, port)]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = topo.popen(topo.px, list(wrapper) + ["haproxy", "-db", "-f", conf], log=name)
    deadline = time.monotonic() + timeout
    for port in relay.values():
        while True:
            if p.poll() is not None:
                raise RuntimeError("haproxy exited: " + topo.read_log(name))
            try:
                topo.connect(topo.px, PROXY_ADDR, port, timeout=1.0).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not listen: " + topo.read_log(name))
                time.sleep(0.05)
    return p, Column("none", lambda kind: "%s:%d" % (PROXY_ADDR, relay[kind]), p.pid)


# ------------------------------------------------------------------ measurements

def bench(topo, args, timeout):
    r = topo.run(topo.sb, [topo.bin("vibepit-bench")] + args,
                 timeout=timeout)
    out = r.stdout.decode(errors="replace")
    try:
        return json.loads(out)
    except ValueError:
        raise RuntimeError("vibepit-bench %s failed (%d): %s %s" % (
            " ".join(args), r.returncode, out[-2000:], r.stderr.decode(errors="replace")[-2000:]))


def median_run(runs, key):
    """The run whose `key` is the median: its latency figures stay consistent with it."""
    ordered = sorted(runs, key=key)
    return ordered[len(ordered) // 2]


def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


class Column:
    """One system under test: how the load generator reaches each of SERVER's ports through
    it, and the process whose CPU time is its cost (None for the no-proxy ceiling)."""

    def __init__(self, proxy, target, pid):
        self.proxy = proxy            # --proxy argument of vibepit-bench ("none": direct)
        self.target = target          # kind -> "host:port" as the load generator names it
        self.pid = pid


def via_proxy(addr, pid):
    return Column(addr, lambda kind: "allowed.test:%d" % PORTS[kind], pid)


def no_proxy():
    return Column("none", lambda kind: "%s:%d" % (SERVER, PORTS[kind]), None)


def metered(topo, col, args, timeout):
    """One vibepit-bench run through `col`, with the CPU it cost the system under test."""
    meter = cpu.Meter(col.pid).start()
    out = bench(topo, args, timeout)
    out["cpu"] = meter.stop()
    return out


def unit_cost(topo, run, units):
    """CPU-seconds per unit of work: the system's processes, and the softirq time of its
    core (kernel packet work no process is charged for), apart."""
    if not units:
        return None, None
    c = run["cpu"]
    sut = topo.cpus["sut"] if topo.cpus else None
    process = c["process_s"] / units if c["process_s"] is not None else None
    softirq = c["softirq_s"].get(sut, 0.0) / units if sut is not None else None
    return process, softirq


def cost_fields(topo, res, key, runs, units_of):
    costs = [unit_cost(topo, r, units_of(r)) for r in runs]
    res[key + "_cpu"] = median(c[0] for c in costs)
    res[key + "_softirq"] = median(c[1] for c in costs)


# The data-path workloads, in the order each round runs them. Each is one vibepit-bench run.
WORKLOADS = ("throughput", "rate", "http", "fixed_rate", "fixed_pipelined", "fixed_http")
FIXED_TUNNEL_WORKLOADS = ("fixed_rate", "fixed_pipelined")


def workload_args(col, duration, fixed_tunnels, fixed_requests):
    """workload -> vibepit-bench arguments for one run through `col` (fixed loads at 0 are left out)."""
    rate_args = ["connect-rate", "--proxy", col.proxy, "--target", col.target("echo"),
                 "--concurrency", "32", "--duration", str(duration), "--max", "2000000", "--linger0"]
    http_args = ["http-rps", "--proxy", col.proxy, "--url", "http://%s/" % col.target("http"),
                 "--connections", "32", "--duration", str(duration), "--max", "5000000"]
    out = {"throughput": ["connect-throughput", "--proxy", col.proxy, "--target", col.target("source"),
                          "--streams", "4", "--duration", str(duration), "--direction", "down"],
           "rate": rate_args, "http": http_args}
    # At a fixed offered load below every system's saturation: what an operator running many
    # sessions on one host pays (cores busy) and what a client waits (p50/p99).
    if fixed_tunnels:
        out["fixed_rate"] = rate_args + ["--rate", str(fixed_tunnels)]
        # The same load with the client's byte sent along with the CONNECT: the client then
        # waits once, as a relay's client does, and the latency is the proxy's own work
        # without the extra turn the protocol asks for. (Direct, the byte always goes at once.)
        if col.proxy != "none":
            out["fixed_pipelined"] = out["fixed_rate"] + ["--pipeline"]
    if fixed_requests:
        out["fixed_http"] = http_args + ["--rate", str(fixed_requests)]
    return out


# Work units of each saturating workload's cost: per GB, per 1 000 tunnels, per 1 000 requests.
UNITS = {"throughput": lambda r: r["results"]["bytes"] / 1e9,
         "rate": lambda r: r["results"]["tunnels"] / 1e3,
         "http": lambda r: r["results"]["requests"] / 1e3}


def run_cost(topo, workload, run):
    """One run's CPU-seconds per unit, process and softirq together (the targets' measure)."""
    process, softirq = unit_cost(topo, run, UNITS[workload](run))
    return None if process is None else process + (softirq or 0.0)


def read_samples(path):
    """`vibepit-bench connect-rate --samples` lines: (start, total, to the 200), in µs."""
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f if not line.startswith("#")]


def pooled(latencies):
    """Percentiles of latencies (µs) pooled over every round's run. One 5 s round's p99
    rests on its hundred slowest tunnels, and two identical relays' per-round p99s differ by
    up to 500 µs here (bench/tail.py's A/A pair); pooled over the rounds they differ by
    about 100."""
    lat = sorted(latencies)
    if not lat:
        return None
    q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))]  # noqa: E731
    return {"count": len(lat), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
            "p999_us": q(0.999)}


# The p99 differences a target reads, with an interval from resampling the runs: (system,
# its fixed load, the system it is compared with at fixed_rate).
P99_PAIRS = (("vibepit", "fixed_rate", "haproxy"), ("haproxy-again", "fixed_rate", "haproxy"),
             ("vibepit", "fixed_pipelined", "haproxy"), ("vibepit", "fixed_rate", "squid"))


def quantile_interval(a_runs, b_runs, q=0.99, draws=1000, level=0.95, seed=14):
    """A bootstrap interval for pooled quantile `q` (the p99 by default) of a minus b, in µs.
    Each side's runs (every tunnel's latency of one run each) are drawn with
    replacement, as many as there are, and pooled as pooled() pools them. A run is the unit
    because the machine's stalls, which set the tail here, come and go within a run: the
    interval says how far the difference moves with which stalls each system happened to
    meet. None with fewer than two runs a side."""
    if len(a_runs) < 2 or len(b_runs) < 2:
        return None
    rng = random.Random(seed)
    tops = [[sorted(r, reverse=True) for r in side] for side in (a_runs, b_runs)]

    def quantile(side):
        drawn = [rng.choice(side) for _ in side]
        n = sum(len(r) for r in drawn)
        rank = n - min(n - 1, int(n * q))  # pooled()'s quantile, counted from the top
        top = [x for r in drawn for x in r[:rank]]  # the pool's `rank` largest are among these
        top.sort(reverse=True)
        return top[rank - 1]

    diffs = sorted(quantile(tops[0]) - quantile(tops[1]) for _ in range(draws))
    cut = int(draws * (1 - level) / 2)
    return [diffs[cut], diffs[draws - 1 - cut]]


def p99_intervals(runs):
    """P99_PAIRS' intervals from measure_rounds()'s runs: "who:load-other" -> [low, high]."""
    out = {}
    for who, load, other in P99_PAIRS:
        a = [r["latencies_us"] for batch in runs.get(who, {}).get(load, []) for r in batch]
        b = [r["latencies_us"] for batch in runs.get(other, {}).get("fixed_rate", []) for r in batch]
        interval = quantile_interval([x for x in a if x], [x for x in b if x])
        if interval:
            out["%s:%s-%s" % (who, load, other)] = interval
    return out


def error_kinds(runs):
    """The load generator's failures over `runs`, by kind."""
    out = {}
    for r in runs:
        for kind, n in r["errors"].items():
            if kind != "total" and n:
                out[kind] = out.get(kind, 0) + n
    return out


def summarize(topo, workload, runs):
    """The figures of one workload through one system from all its runs: the median, with
    every run's rate kept beside it, and the CPU-seconds per unit."""
    res = {}
    if workload == "throughput":
        t = median_run(runs, lambda r: r["results"]["gbit_per_s"])
        res["throughput_gbit"] = t["results"]["gbit_per_s"]
        res["throughput_runs"] = [r["results"]["gbit_per_s"] for r in runs]
    elif workload == "rate":
        r = median_run(runs, lambda x: x["results"]["tunnels_per_s"])
        res["rate_per_s"] = r["results"]["tunnels_per_s"]
        res["rate_runs"] = [x["results"]["tunnels_per_s"] for x in runs]
        res["rate_p50_us"] = r["results"]["latency_us"].get("p50_us")
        res["rate_p99_us"] = r["results"]["latency_us"].get("p99_us")
        res["rate_errors"] = sum(x["errors"]["total"] for x in runs)
        res["rate_error_kinds"] = error_kinds(runs)
    elif workload == "http":
        h = median_run(runs, lambda x: x["results"]["requests_per_s"])
        res["http_rps"] = h["results"]["requests_per_s"]
        res["http_runs"] = [x["results"]["requests_per_s"] for x in runs]
        res["http_p99_us"] = h["results"]["latency_us"].get("p99_us")
        res["http_errors"] = sum(x["errors"]["total"] for x in runs)
        res["http_error_kinds"] = error_kinds(runs)
    else:
        count = "tunnels" if workload in FIXED_TUNNEL_WORKLOADS else "requests"
        m = median_run(runs, lambda x: x["results"]["latency_us"].get("p99_us") or 0)
        sut = topo.cpus["sut"] if topo.cpus else None
        res[workload] = {
            "offered_per_s": m["offered_per_s"],
            "achieved_per_s": m["results"][count] / m["results"]["elapsed_s"],
            "p50_us": m["results"]["latency_us"].get("p50_us"),
            "p99_us": m["results"]["latency_us"].get("p99_us"),
            "p99_runs": [x["results"]["latency_us"].get("p99_us") for x in runs],
            "cores": median(x["cpu"]["process_s"] / x["cpu"]["wall_s"]
                            if x["cpu"]["process_s"] is not None else None for x in runs),
            "softirq_cores": median(x["cpu"]["softirq_s"].get(sut, 0.0) / x["cpu"]["wall_s"]
                                    for x in runs) if sut is not None else None,
            "errors": sum(x["errors"]["total"] for x in runs),
            "error_kinds": error_kinds(runs),
        }
    if workload in UNITS:
        cost_fields(topo, res, workload, runs, UNITS[workload])
    return res


def measure_rounds(topo, systems, rounds, repeat, duration, fixed_tunnels, fixed_requests, slices=1,
                   seed=14):
    """Every workload through every system, interleaved: each round runs each workload through
    each system (`repeat` runs), in an order that rotates by one system per round, so that
    the systems a target compares are measured seconds apart rather than minutes, and none is
    always first. On a shared machine the rate of everything drifts by 10-25% over minutes;
    this keeps the drift out of the ratios.

    A fixed tunnel load's run is cut into `slices` runs of duration / slices seconds, the
    systems taking turns slice by slice. Its figure is a p99, and a slow spell of the machine
    lasting seconds lands on one system's 5 s run but is shared by several systems' 1 s
    slices. Shorter stalls, within a slice, still fall on one system: quantile_interval() says
    how far they move a difference. The tunnels counted are the same.

    Each slice runs the systems in a new order, drawn at random (from `seed`, so a run can be
    repeated), so that every system follows every other about equally often. What ran just
    before moves a slice's tail: after the no-proxy column the proxy core has been idle for a
    second, and squid leaves work behind. A fixed rotation, even one reversed every other
    slice, keeps each system's neighbours: vibepit-proxy always came after the no-proxy column
    or haproxy, never after squid, and the second haproxy after squid half the time.

    `systems` maps a name to its Column. Returns (name -> figures, name -> workload -> the
    runs of each round). A system whose run fails is reported as None and left out of the
    rounds that follow."""
    names = list(systems)
    args = {n: workload_args(systems[n], duration, fixed_tunnels, fixed_requests) for n in names}
    sliced = {n: workload_args(systems[n], duration / slices, fixed_tunnels, fixed_requests)
              for n in names}
    runs = {n: {w: [] for w in args[n]} for n in names}
    samples = os.path.join(topo.tmp, "samples.txt")
    rng = random.Random(seed)
    failed = {}
    for rnd in range(rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for w in WORKLOADS:
            fixed_tunnels_run = w in FIXED_TUNNEL_WORKLOADS
            extra = ["--samples", samples] if fixed_tunnels_run else []
            batches = {n: [] for n in order}
            for _ in range(slices if fixed_tunnels_run else 1):
                for n in (rng.sample(order, len(order)) if fixed_tunnels_run else order):
                    if n in failed or w not in args[n]:
                        continue
                    argv = (sliced if fixed_tunnels_run else args)[n][w] + extra
                    try:
                        for _ in range(repeat):
                            run = metered(topo, systems[n], argv, duration + 60)
                            if fixed_tunnels_run:
                                run["latencies_us"] = [t for _, t, _ in read_samples(samples)]
                            batches[n].append(run)
                    except RuntimeError as e:
                        print("compare: %s failed: %s" % (n, e), flush=True)
                        failed[n] = str(e)
            for n in order:
                if n in failed or not batches[n]:
                    continue
                for run in batches[n]:
                    run["offered_per_s"] = {"fixed_rate": fixed_tunnels, "fixed_pipelined": fixed_tunnels,
                                            "fixed_http": fixed_requests}.get(w)
                    if run["errors"].get("total"):   # every kind is kept in the JSON too
                        print("compare: round %d, %s, %s: errors %s" % (rnd + 1, n, w, {
                            k: v for k, v in run["errors"].items() if v}), flush=True)
                runs[n][w].append(batches[n])
        print("compare: round %d of %d done" % (rnd + 1, rounds), flush=True)
    figures = {}
    for n in names:
        if n in failed:
            figures[n] = None
            continue
        figures[n] = {}
        for w, per_round in runs[n].items():
            figures[n].update(summarize(topo, w, [r for batch in per_round for r in batch]))
            if w in FIXED_TUNNEL_WORKLOADS:
                figures[n][w]["pooled"] = pooled([t for batch in per_round for r in batch
                                                  for t in r["latencies_us"]])
    return figures, runs


def per_round(topo, runs):
    """name -> workload -> one figure per round, the median of that round's runs: CPU-seconds
    per unit (process and softirq) for a saturating workload, p99 µs for a fixed load (of
    the round's tunnels pooled over its slices, for a fixed tunnel load). The targets compare
    two systems round by round with these."""
    out = {}
    for name, workloads in runs.items():
        out[name] = {}
        for w, rounds in workloads.items():
            if w in FIXED_TUNNEL_WORKLOADS:  # the round's slices' tunnels pooled
                out[name][w] = [(pooled([t for r in batch for t in r["latencies_us"]]) or {}).get("p99_us")
                                for batch in rounds]
                continue
            if w in UNITS:
                value = lambda r, w=w: run_cost(topo, w, r)
            else:
                value = lambda r: r["results"]["latency_us"].get("p99_us")
            out[name][w] = [median(value(r) for r in batch) for batch in rounds]
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def holdings(topo, pid):
    """What process `pid` (in "px") holds: its descriptors by kind, and its TCP sockets by
    state with up to five lines of `ss` for each."""
    kinds, states, sample = {}, {}, []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue   # closed meanwhile
        kind = target.split(":")[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    ss = topo.run(topo.px, ["ss", "-tanpo"], timeout=30).stdout.decode(errors="replace")
    for line in ss.splitlines():
        if "pid=%d," % pid in line:
            state = line.split()[0]
            states[state] = states.get(state, 0) + 1
            if states[state] <= 5:
                sample.append(" ".join(line.split()))
    return {"kinds": kinds, "tcp_states": states, "tcp_sample": sample}


def idle_memory(topo, proc, proxy, count, hold, spare_fds):
    """Proxy RSS growth per idle tunnel while `count` tunnels are open."""
    # Warm the proxy up so allocator arenas and code pages are not charged to tunnels.
    bench(topo, ["idle-tunnels", "--proxy", proxy, "--target", "allowed.test:%d" % PORTS["discard"],
                 "--count", "200", "--hold", "1"], 60)
    time.sleep(0.5)
    # The count leaves the proxy `spare_fds` descriptors beside two per tunnel, and every
    # one it still holds past that costs tunnels (refused for want of descriptors).
    # Connections of the runs before may still be closing: wait for them.
    deadline = time.monotonic() + 30
    while open_fds(proc.pid) > spare_fds and time.monotonic() < deadline:
        time.sleep(0.2)
    fds = open_fds(proc.pid)
    leftover = holdings(topo, proc.pid) if fds > spare_fds else None
    if leftover:
        print("compare: the proxy still holds %d descriptors: %s" % (fds, leftover), flush=True)
    before = rss_kib(proc.pid)
    ready = os.path.join(topo.tmp, "idle.ready")
    if os.path.exists(ready):
        os.unlink(ready)
    out = os.path.join(topo.tmp, "idle.json")
    p = topo.popen(topo.sb, [topo.bin("vibepit-bench"), "idle-tunnels",
                             "--proxy", proxy, "--target", "allowed.test:%d" % PORTS["discard"],
                             "--count", str(count), "--hold", str(hold), "--ready-file", ready,
                             "--out", out], log="idle")
    deadline = time.monotonic() + 120
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("idle-tunnels did not get ready: " + topo.read_log("idle"))
        time.sleep(0.1)
    time.sleep(1.0)
    during = rss_kib(proc.pid)
    with open(ready) as f:
        established = int(f.read().split()[0])
    p.wait(hold + 60)
    topo.stop_process(p)
    with open(out) as f:
        errors = json.load(f).get("errors", {})
    return {"tunnels": established, "of": count, "errors": errors, "proxy_fds_before": fds,
            "leftover": leftover, "rss_before_kib": before, "rss_during_kib": during,
            "kib_per_tunnel": (during - before) / max(established, 1)}


def on_sut_core(argv):
    """argv run on the system-under-test core, when there are two: a microbenchmark that
    migrates between cores (and shares one with the rest of the machine) measures noise."""
    return (["taskset", "-c", str(SUT_CPU)] if (os.cpu_count() or 1) >= 2 else []) + list(argv)


# Rounds of the matcher microbenchmark, and the time each of its four benchmarks runs in one.
MATCHER_ROUNDS = 15
MATCHER_MIN_TIME_S = 0.2
MATCHER_FILTER = "BM_HttpMatch/(hit|miss)/(10|100000)$"


def matcher_round(exe):
    """One round: the four benchmarks (hit and miss, at 10 and at 100 000 rules) run once each
    in a random order, in one process. Returns {kind: {"ns_10", "ns_100000", "ratio"}}."""
    r = subprocess.run(on_sut_core([exe, "--benchmark_filter=" + MATCHER_FILTER,
                                    "--benchmark_format=json",
                                    "--benchmark_min_time=%g" % MATCHER_MIN_TIME_S,
                                    "--benchmark_enable_random_interleaving=true"]),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("vibepit-microbench exited %d: %s" % (r.returncode, r.stderr.strip()[-500:]))
    ns = {b["name"]: b["cpu_time"] for b in json.loads(r.stdout)["benchmarks"]
          if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred")}
    out = {}
    for kind in ("hit", "miss"):
        small, large = ns["BM_HttpMatch/%s/10" % kind], ns["BM_HttpMatch/%s/100000" % kind]
        out[kind] = {"ns_10": small, "ns_100000": large, "ratio": large / small}
    return out


def matcher_ratio(bin_dir, rounds=MATCHER_ROUNDS):
    """How much longer a match takes with 100 000 rules than with 10. This host's speed moves
    by half from one second to the next, so a ratio of two sizes measured seconds apart is
    mostly that drift. Each round measures both sizes within a second or two, in a random
    order (matcher_round); a round's figure is the larger of its hit and miss ratios, and the
    target is judged on the median of the rounds' figures with its interval (median_interval)."""
    exe = os.path.join(bin_dir, "vibepit-microbench")
    per_round = [matcher_round(exe) for _ in range(rounds)]
    worst = [max(r["hit"]["ratio"], r["miss"]["ratio"]) for r in per_round]
    out = {"rounds": per_round, "worst": statistics.median(worst),
           "worst_per_round": worst, "interval": median_interval(worst)}
    for kind in ("hit", "miss"):
        out[kind] = {key: statistics.median(r[kind][key] for r in per_round)
                     for key in ("ns_10", "ns_100000", "ratio")}
    return out


# ------------------------------------------------------------------ report

def write_block(path, name, lines, heading="", writer="bench/compare.sh"):
    """Replace the generated block `name` in the markdown at `path` (or append it, under
    `heading`). The block sits between <!-- NAME:begin ... --> and <!-- NAME:end -->, and its
    first line names the `writer`."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = "\n".join(["<!-- %s:begin (written by %s; do not edit by hand) -->" % (name, writer)]
                      + lines + ["<!-- %s:end -->" % name])
    pattern = r"<!-- %s:begin.*?<!-- %s:end -->" % (re.escape(name), re.escape(name))
    if re.search(pattern, text, flags=re.S):
        text = re.sub(pattern, lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + heading + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def publish(res, lines, json_path, markdown, block, writer):
    """A bench script's end: its results as JSON at `json_path`, its table on standard
    output and, with `markdown`, as the generated block `block` of that file."""
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(lines))
    if markdown:
        write_block(markdown, block, lines, writer=writer)


COLUMNS = [("none", "no proxy (ceiling)"), ("haproxy", "haproxy (relay floor)"),
           ("haproxy-again", "haproxy again (A/A)"),
           ("vibepit", "vibepit-proxy"), ("squid", "squid"), ("tinyproxy", "tinyproxy")]


def percentiles(fig):
    """(p50, p99) of a fixed-load figure: pooled over the rounds where every tunnel's latency
    was kept, else those of its median run."""
    src = fig.get("pooled") or fig
    return src["p50_us"], src["p99_us"]


def spread(values, fmt, median=True):
    """"; rounds LOW–HIGH" for a target's per-round figures (nothing for a single round), and
    with `median` the interval for their median where there are enough rounds for one
    (median_interval)."""
    if len(values) < 2:
        return ""
    text = "; rounds %s–%s" % (fmt % min(values), fmt % max(values))
    mi = median and median_interval(values)
    if mi:
        text += "; %.0f%% interval for the median %s–%s" % (100 * mi[2], fmt % mi[0], fmt % mi[1])
    return text


# The confidence a target's verdict asks of an interval for a median of per-round figures.
MEDIAN_LEVEL = 0.9


def median_interval(values, level=MEDIAN_LEVEL):
    """An interval for the median of per-round figures that assumes nothing about their
    distribution: from the k-th smallest to the k-th largest, which holds the true median
    unless k or more rounds fell on one side of it, a chance of 2·P(Binomial(n, ½) < k). k is
    the largest that keeps the coverage at `level` or above. Returns (low, high, coverage), or
    None when even the smallest to the largest cover less (fewer than 5 rounds at 0.9)."""
    n, ordered, best = len(values), sorted(values), None
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if coverage >= level:
            best = (ordered[k - 1], ordered[n - k], coverage)
    return best


def verdict(point, interval, ok):
    """A target's verdict from its point figure and the interval around it (None: by the point
    alone). Met or not met when the whole interval lies on one side of the goal; where the goal
    lies inside it, the run cannot tell, and the verdict says so and which side the point is on.
    `ok` says whether a figure meets the goal (monotone, so the interval's ends decide)."""
    if point is None or ok(point) is None:
        return "-"
    if interval is not None:
        low, high = ok(interval[0]), ok(interval[1])
        if low != high:
            return "not resolved (the estimate %s it)" % ("meets" if ok(point) else "misses")
    return "met" if ok(point) else "**not met**"


def pair_verdict(interval, same):
    """The A/A row's column: "-" while the pair's interval holds `same` (1× for a ratio, 0 for
    a difference), as it should for two identical systems; otherwise a warning that this run's
    intervals claim more than the machine can tell."""
    if interval is None or interval[0] <= same <= interval[1]:
        return "-"
    return "**the pair differs**: intervals in this run are too narrow"


def matcher_target(m):
    """The matcher row's measured text, goal and verdict from matcher_ratio's figures. Runs
    before 2026-12-02 measured each size once, seconds apart: one figure, judged alone."""
    worst = m.get("worst", max(m["hit"]["ratio"], m["miss"]["ratio"]))
    detail = "hit %.1f→%.1f ns, miss %.1f→%.1f ns" % (
        m["hit"]["ns_10"], m["hit"]["ns_100000"], m["miss"]["ns_10"], m["miss"]["ns_100000"])
    if "worst_per_round" in m:
        detail = "the larger of hit and miss, median of %d rounds; %s%s" % (
            len(m["worst_per_round"]), detail, spread(m["worst_per_round"], "%.2f×"))
    if m.get("when"):  # measured apart from the run (re-measured into its JSON)
        detail += "; measured %s" % m["when"]
    return "%.2f× (%s)" % (worst, detail), "≤ 2×", verdict(worst, m.get("interval"), lambda w: w <= 2)


def render(results, path):
    peers = results["peers"]
    cols = [(k, label) for k, label in COLUMNS if k in peers]
    header = ["| measurement | %s |" % " | ".join(label for _, label in cols),
              "|---|%s" % ("---|" * len(cols))]

    def table(rows):
        out = list(header)
        for name, get, fmt in rows:
            cells = []
            for k, _ in cols:
                v = get(peers[k]) if peers[k] else None
                cells.append(fmt(v) if v is not None else "-")
            out.append("| %s | %s |" % (name, " | ".join(cells)))
        return out

    field = lambda key: (lambda p: p.get(key))
    n0, n2, n3 = (lambda x: "%.0f" % x), (lambda x: "%.2f" % x), (lambda x: "%.3f" % x)
    rates = table([
        ("CONNECT bulk throughput (Gbit/s)", field("throughput_gbit"), n2),
        ("CONNECT set-up rate (tunnels/s)", field("rate_per_s"), n0),
        ("CONNECT set-up p50 (µs)", field("rate_p50_us"), n0),
        ("CONNECT set-up p99 (µs)", field("rate_p99_us"), n0),
        ("keep-alive HTTP (requests/s)", field("http_rps"), n0),
        ("keep-alive HTTP p99 (µs)", field("http_p99_us"), n0),
    ])
    costs = table([
        ("bulk: CPU-s per GB, process", field("throughput_cpu"), n3),
        ("bulk: CPU-s per GB, softirq of its core", field("throughput_softirq"), n3),
        ("set-up: CPU-s per 1 000 tunnels, process", field("rate_cpu"), n3),
        ("set-up: CPU-s per 1 000 tunnels, softirq", field("rate_softirq"), n3),
        ("keep-alive: CPU-s per 1 000 requests, process", field("http_cpu"), n3),
        ("keep-alive: CPU-s per 1 000 requests, softirq", field("http_softirq"), n3),
    ])
    ft, fr = results.get("fixed_tunnels"), results.get("fixed_requests")
    load_rows = []
    for key, label in (("fixed_rate", "%s tunnels/s offered" % ft), ("fixed_http", "%s requests/s offered" % fr)):
        at = lambda p, key=key: p.get(key)
        load_rows += [
            (label + ": achieved", lambda p, at=at: at(p) and at(p)["achieved_per_s"], n0),
            ("… p50 / p99 (µs)%s" % (", every round's tunnels pooled" if key in FIXED_TUNNEL_WORKLOADS else ""),
             lambda p, at=at: at(p) and "%s / %s" % percentiles(at(p)), str),
            ("… cores busy: process + softirq",
             lambda p, at=at: at(p) and at(p)["cores"] is not None and "%.2f + %.2f" % (
                 at(p)["cores"], at(p)["softirq_cores"] or 0) or None, str),
        ]
        if key == "fixed_rate":
            pipe = lambda p: p.get("fixed_pipelined")
            load_rows.append(("… the byte sent with the CONNECT (one client turn, as through a relay): p50 / p99 (µs)",
                              lambda p: pipe(p) and "%s / %s" % percentiles(pipe(p)), str))
    rest = lambda key, fmt: (lambda p: p.get("at_rest") and fmt % p["at_rest"][key])
    load_rows += [
        ("at rest (no traffic): wake-ups per second", rest("wakeups_per_s", "%.1f"), str),
        ("at rest: CPU-ms per minute", rest("cpu_ms_per_min", "%.0f"), str),
    ]
    loads = table(load_rows)

    def target(label, value, goal, judged):
        return "| %s | %s | %s | %s |" % (label, value, goal, judged)

    targets = []

    rounds = results.get("per_round", {})

    def pairs(key, other, who="vibepit"):
        """(who, other) per round in which both completed `key`."""
        a, b = rounds.get(who, {}).get(key, []), rounds.get(other, {}).get(key, [])
        return [(x, y) for x, y in zip(a, b) if x is not None and y is not None]

    # The A/A pair: a second haproxy with the same configuration, measured like the others.
    # Whatever separates the two is the machine; each target on haproxy is followed by the
    # same comparison between them.
    aa = "haproxy-again"
    aa_goal = "what the machine cannot tell apart"

    def ratio(p):
        """(median of the per-round ratios, the interval for it or None, its text with both
        medians, the spread and the interval)."""
        ratios = [x / y for x, y in p]
        r = statistics.median(ratios)
        return r, median_interval(ratios), "%.2f× (%.3f vs %.3f%s)" % (
            r, statistics.median(x for x, _ in p), statistics.median(y for _, y in p),
            spread(ratios, "%.2f×"))

    def cost_target(label, key, other, factor):
        """vibepit's CPU per unit against `other`'s: the median of the per-round ratios."""
        for who in ("vibepit", aa) if other == "haproxy" else ("vibepit",):
            p = pairs(key, other, who)
            if not p:
                continue
            r, interval, value = ratio(p)
            if who == aa:
                targets.append(target("(A/A) %s, haproxy again vs haproxy" % label, value, aa_goal,
                                      pair_verdict(interval, 1.0)))
            else:
                targets.append(target("%s vs %s" % (label, other), value, "≤ %s×" % factor,
                                      verdict(r, interval, lambda v: v <= factor)))

    def relay_floor(label, key, other, pair=True):
        """For information, beside a target against `other`: the relay floor's own cost
        against `other`'s (no proxy can do less per unit than relay it) and, with `pair`, the
        A/A pair's against haproxy's."""
        for who, against in (("haproxy", other),) + (((aa, "haproxy"),) if pair else ()):
            p = pairs(key, against, who)
            if p:
                _, interval, value = ratio(p)
                targets.append(target("(information) %s, %s vs %s" % (
                    label, "haproxy again" if who == aa else who, against), value,
                    "the relay floor" if who == "haproxy" else aa_goal,
                    pair_verdict(interval, 1.0) if who == aa else "-"))

    def pooled_p99(system, key):
        fig = (results["peers"].get(system) or {}).get(key) or {}
        return (fig.get("pooled") or {}).get("p99_us")

    def p99_row(label, key, other, goal, ok, who="vibepit"):
        """`who`'s p99 at the fixed set-up load minus `other`'s: every round's tunnels
        pooled (the per-round differences beside it, for their spread)."""
        a, b = pooled_p99(who, key), pooled_p99(other, "fixed_rate")
        if a is None or b is None:
            return
        diffs = [x - y for x, y in zip(rounds.get(who, {}).get(key, []),
                                       rounds.get(other, {}).get("fixed_rate", []))
                 if x is not None and y is not None]
        interval = results.get("p99_intervals", {}).get("%s:%s-%s" % (who, key, other))
        within = "; 95%% interval %+d to %+d" % tuple(interval) if interval else ""
        judged = pair_verdict(interval, 0) if who == aa else verdict(a - b, interval, ok)
        targets.append(target(label, "%d vs %d µs pooled, difference %+d µs%s%s" % (
            a, b, a - b, within, spread(diffs, "%+.0f", median=False)), goal, judged))

    def p99_target(other, goal, margin_us):
        p99_row("set-up p99 at %s tunnels/s vs %s" % (ft, other), "fixed_rate", other, goal,
                lambda d: d <= margin_us)
        if other == "haproxy":
            p99_row("(A/A) set-up p99 at %s tunnels/s, haproxy again vs haproxy" % ft, "fixed_rate",
                    other, aa_goal, lambda d: None, who=aa)
    cost_target("bulk CPU-s per GB", "throughput", "haproxy", 1.05)
    cost_target("set-up CPU-s per 1 000 tunnels", "rate", "haproxy", 1.3)
    cost_target("set-up CPU-s per 1 000 tunnels", "rate", "squid", 0.5)
    relay_floor("set-up CPU-s per 1 000 tunnels", "rate", "squid", pair=False)
    p99_target("haproxy", "≤ haproxy's + 100 µs", 100)
    # For information: the same comparison with the client's byte sent along with the
    # CONNECT, so that both clients wait once; what is left is the proxy's own work.
    p99_row("(information) set-up p99 at %s tunnels/s, the byte sent with the CONNECT, vs haproxy" % ft,
            "fixed_pipelined", "haproxy", "the client turn the protocol adds, taken out", lambda d: None)
    p99_target("squid", "below squid's", -1)
    cost_target("keep-alive CPU-s per 1 000 requests", "http", "squid", 0.3)
    relay_floor("keep-alive CPU-s per 1 000 requests", "http", "squid")
    mem = results.get("idle_memory")
    if mem:
        short = ""
        if mem.get("of", mem["tunnels"]) > mem["tunnels"]:   # say why some did not open
            kinds = ", ".join("%s %d" % (k, v) for k, v in mem.get("errors", {}).items() if k != "total" and v)
            short = "; %d asked for, failed: %s" % (mem["of"], kinds or "none counted")
        targets.append(target("memory per idle tunnel (%d tunnels%s)" % (mem["tunnels"], short),
                              "%.1f KiB" % mem["kib_per_tunnel"], "≤ 8 KiB at ≥ 9 950 tunnels",
                              verdict(mem, None, lambda m: m["kib_per_tunnel"] <= 8 and m["tunnels"] >= 9950)))
    if results.get("matcher"):
        targets.append(target("match time, 100 000 vs 10 rules", *matcher_target(results["matcher"])))

    pin = results.get("pinning")
    where = ("each system under test pinned to core %d, the load generator and servers to core %d" % (
        pin["sut"], pin["load"]) if pin else "not pinned")
    write_block(path, "compare", [
        "Run: %s, %s, %d s per measurement, %d rounds of %d run(s) each, the systems interleaved "
        "within each round; vibepit-proxy threads=%s; %s." % (
            results["when"], results["machine"], results["duration_s"], results.get("rounds", 1),
            results["repeat"], results["vibepit_threads"], where),
        "",
        "At saturation:",
        "",
    ] + rates + [
        "",
        "CPU-seconds per unit of work at saturation (the system's process tree; the softirq time "
        "of its core apart):",
        "",
    ] + costs + [
        "",
        "At a fixed offered load, and at rest%s:" % (
            " (a fixed tunnel load in %d slices a round, the systems taking turns slice by slice)"
            % results["fixed_slices"] if results.get("fixed_slices", 1) > 1 else ""),
        "",
    ] + loads + [
        "",
        "Targets (CPU compared as process + softirq; a CPU ratio is the median of the "
        "per-round ones, with a %.0f%%-or-better interval for that median from the rounds' order "
        "statistics (from 5 rounds up); a p99 difference is that of every round's tunnels pooled, with a 95%% "
        "bootstrap interval over the runs; the per-round range beside each. A target is met or "
        "not met when its whole interval lies on one side of the goal, and not resolved when "
        "the goal lies inside it: the run cannot tell):" % (100 * MEDIAN_LEVEL),
        "",
        "| target | measured | goal | |",
        "|---|---|---|---|",
    ] + targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--duration", type=int, default=5, help="seconds per measurement")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds; each runs every workload through every system, interleaved. The "
                         "figures are medians over all runs, the targets medians of per-round ratios")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each workload per system per round")
    ap.add_argument("--threads", type=int, default=1,
                    help="vibepit-proxy threads (0 = per core); 1 matches the one core it is pinned to")
    ap.add_argument("--idle-count", type=int, default=10000,
                    help="idle tunnels for the memory figure; capped by the open-file limit")
    ap.add_argument("--peers", default="haproxy,haproxy-again,squid,tinyproxy",
                    help="comma list; empty for none. haproxy-again is a second haproxy, the same "
                         "as the first: the A/A pair, which shows what the machine cannot resolve")
    ap.add_argument("--fixed-tunnels", type=int, default=2000,
                    help="offered tunnels/s for the fixed-load figures (0: skip)")
    ap.add_argument("--fixed-requests", type=int, default=5000,
                    help="offered keep-alive requests/s for the fixed-load figures (0: skip)")
    ap.add_argument("--slices", type=int, default=5,
                    help="each fixed tunnel load's run is cut into this many, the systems taking "
                         "turns slice by slice (see measure_rounds)")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the system under test and the load to different cores")
    ap.add_argument("--rest", type=float, default=10.0,
                    help="seconds each system is watched with no traffic (wake-ups, CPU at rest)")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-results.json"))
    ap.add_argument("--markdown", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--render", metavar="JSON",
                    help="measure nothing: write the tables of a run kept in JSON to --markdown")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            render(json.load(f), args.markdown)
        return
    if os.geteuid() != 0:
        sys.exit("compare: needs root (network namespaces)")
    netns.install_signal_cleanup()

    results = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
               "duration_s": args.duration, "rounds": args.rounds, "repeat": args.repeat,
               "vibepit_threads": args.threads, "fixed_tunnels": args.fixed_tunnels,
               "fixed_requests": args.fixed_requests, "fixed_slices": args.slices, "peers": {}}
    starters = {"haproxy": start_haproxy, "haproxy-again": lambda topo: start_haproxy(topo, 1),
                "squid": start_squid, "tinyproxy": start_tinyproxy}
    peers = [x for x in args.peers.split(",") if x]
    for name in peers:
        if name not in starters:
            sys.exit("compare: no peer %r (the peers: %s)" % (name, ", ".join(starters)))
    fixed = (args.fixed_tunnels, args.fixed_requests)
    with BenchTopology(args.bin_dir, pin=not args.no_pin) as topo:
        results["pinning"] = topo.cpus
        # Every system runs for the whole measurement, each on its own port, so that the rounds
        # can interleave them; between its runs a system is idle.
        systems, procs = {"none": no_proxy()}, {}
        p, addr = start_vibepit(topo, args.threads)
        systems["vibepit"], procs["vibepit"] = via_proxy(addr, p.pid), p
        print("compare: vibepit-proxy", addr, flush=True)
        for name in peers:
            try:
                p, col = starters[name](topo)
            except RuntimeError as e:
                print("compare: %s did not start: %s" % (name, e), flush=True)
                results["peers"][name] = None
                continue
            systems[name], procs[name] = col, p
            print("compare:", name, col.proxy, col.target("source"), flush=True)
        rest = cpu.at_rest_all({n: p.pid for n, p in procs.items()}, args.rest)
        figures, runs = measure_rounds(topo, systems, args.rounds, args.repeat, args.duration, *fixed,
                                       slices=args.slices)
        for name, fig in figures.items():
            if fig is not None and name in rest:
                fig["at_rest"] = rest[name]
            results["peers"][name] = fig
            print("  ", name, fig, flush=True)
        live = {n: r for n, r in runs.items() if figures[n] is not None}
        results["per_round"] = per_round(topo, live)
        results["p99_intervals"] = p99_intervals(live)
        if args.idle_count and figures["vibepit"] is not None:
            # Each tunnel holds two of the proxy's descriptors; keep a margin for the rest.
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            count = min(args.idle_count, (hard - 100) // 2)
            if count < args.idle_count:
                print("compare: open-file hard limit %d caps idle tunnels at %d" % (hard, count))
            results["idle_memory"] = idle_memory(topo, procs["vibepit"], addr, count, 5, hard - 2 * count - 20)
            results["idle_memory"]["nofile_hard_limit"] = hard
            print("   idle:", results["idle_memory"], flush=True)
        for p in procs.values():
            topo.stop_process(p)
    results["matcher"] = matcher_ratio(args.bin_dir)
    print("compare: matcher", results["matcher"], flush=True)

    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))
    render(results, args.markdown)
    print("compare: wrote %s and %s" % (args.json, args.markdown))


if __name__ == "__main__":
    main()
