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
matcher microbenchmark at 10 and 100 000 rules. Results go to a JSON file and to the
table in docs/benchmarks.md.

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from harness import netns  # noqa: E402

SERVER = "198.51.100.10"
SB_ADDR, PROXY_ADDR = "192.0.2.2", "192.0.2.1"  # RFC 5737 TEST-NET-1, inside our namespaces
PORTS = {"discard": 9001, "source": 9002, "echo": 9003, "http": 8080}


class BenchTopology(netns.Topology):
    """The test topology, with vibepit-bench servers instead of the Python fakes."""

    def __init__(self, bin_dir):
        super().__init__(ipv6=False)
        # Children run in the topology's temp directory: a relative --bin-dir must not
        # resolve there.
        self.bin_dir = os.path.abspath(bin_dir)

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


def start_vibepit(topo, threads):
    cfg = {
        "proxy-listen": [PROXY_ADDR + ":0"],
        "upstream-dns": [netns.DNS_ADDR],
        "allow-http": ["allowed.test:*"],
        "decision-log": os.path.join(topo.tmp, "decisions.ndjson"),
        "threads": threads,
        "max-connections": 100000,
    }
    path = os.path.join(topo.tmp, "vibepit.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [topo.bin("vibepit-proxy"), "--config", path],
                   log="vibepit")
    m = wait_for_listen(topo, p, "vibepit", r"listening proxy 192\.0\.2\.1:(\d+)")
    return p, "%s:%s" % (PROXY_ADDR, m.group(1))


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
    return p, PROXY_ADDR + ":3128"


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
    return p, PROXY_ADDR + ":8888"


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


def measure(topo, proxy, duration, repeat):
    """The three data-path figures through `proxy` ("none" for the ceiling), each the median
    of `repeat` runs; the spread is kept next to it."""
    host = SERVER if proxy == "none" else "allowed.test"
    res = {}
    runs = [bench(topo, ["connect-throughput", "--proxy", proxy, "--target",
                         "%s:%d" % (host, PORTS["source"]), "--streams", "4",
                         "--duration", str(duration), "--direction", "down"], duration + 60)
            for _ in range(repeat)]
    t = median_run(runs, lambda r: r["results"]["gbit_per_s"])
    res["throughput_gbit"] = t["results"]["gbit_per_s"]
    res["throughput_runs"] = [r["results"]["gbit_per_s"] for r in runs]
    runs = [bench(topo, ["connect-rate", "--proxy", proxy, "--target", "%s:%d" % (host, PORTS["echo"]),
                         "--concurrency", "32", "--duration", str(duration), "--max", "2000000",
                         "--linger0"], duration + 60)
            for _ in range(repeat)]
    r = median_run(runs, lambda x: x["results"]["tunnels_per_s"])
    res["rate_per_s"] = r["results"]["tunnels_per_s"]
    res["rate_runs"] = [x["results"]["tunnels_per_s"] for x in runs]
    res["rate_p50_us"] = r["results"]["latency_us"].get("p50_us")
    res["rate_p99_us"] = r["results"]["latency_us"].get("p99_us")
    res["rate_errors"] = sum(x["errors"]["total"] for x in runs)
    runs = [bench(topo, ["http-rps", "--proxy", proxy, "--url", "http://%s:%d/" % (host, PORTS["http"]),
                         "--connections", "32", "--duration", str(duration), "--max", "5000000"],
                  duration + 60)
            for _ in range(repeat)]
    h = median_run(runs, lambda x: x["results"]["requests_per_s"])
    res["http_rps"] = h["results"]["requests_per_s"]
    res["http_runs"] = [x["results"]["requests_per_s"] for x in runs]
    res["http_p99_us"] = h["results"]["latency_us"].get("p99_us")
    res["http_errors"] = sum(x["errors"]["total"] for x in runs)
    return res


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def idle_memory(topo, proc, proxy, count, hold):
    """Proxy RSS growth per idle tunnel while `count` tunnels are open."""
    # Warm the proxy up so allocator arenas and code pages are not charged to tunnels.
    bench(topo, ["idle-tunnels", "--proxy", proxy, "--target", "allowed.test:%d" % PORTS["discard"],
                 "--count", "200", "--hold", "1"], 60)
    time.sleep(0.5)
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
    return {"tunnels": established, "rss_before_kib": before, "rss_during_kib": during,
            "kib_per_tunnel": (during - before) / max(established, 1)}


def matcher_ratio(bin_dir):
    exe = os.path.join(bin_dir, "vibepit-microbench")
    r = subprocess.run([exe, "--benchmark_filter=BM_HttpMatch/(hit|miss)/(10|100000)$",
                        "--benchmark_format=json", "--benchmark_repetitions=3",
                        "--benchmark_report_aggregates_only=true"],
                       capture_output=True, text=True, timeout=300)
    data = json.loads(r.stdout)
    med = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            med[b["run_name"]] = b["cpu_time"]
    out = {}
    for kind in ("hit", "miss"):
        small = med["BM_HttpMatch/%s/10" % kind]
        large = med["BM_HttpMatch/%s/100000" % kind]
        out[kind] = {"ns_10": small, "ns_100000": large, "ratio": large / small}
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


def ratio(a, b):
    return a / b if b else float("nan")


def render(results, path):
    peers = results["peers"]
    v, s, t, c = peers["vibepit"], peers.get("squid"), peers.get("tinyproxy"), peers["none"]
    rows = []

    def row(name, key, fmt):
        cells = [fmt(p[key]) if p and p.get(key) is not None else "-" for p in (c, v, s, t)]
        rows.append("| %s | %s |" % (name, " | ".join(cells)))
    row("CONNECT bulk throughput (Gbit/s)", "throughput_gbit", lambda x: "%.2f" % x)
    row("CONNECT setup rate (tunnels/s)", "rate_per_s", lambda x: "%.0f" % x)
    row("CONNECT setup p50 (µs)", "rate_p50_us", lambda x: "%.0f" % x)
    row("CONNECT setup p99 (µs)", "rate_p99_us", lambda x: "%.0f" % x)
    row("keep-alive HTTP (requests/s)", "http_rps", lambda x: "%.0f" % x)
    row("keep-alive HTTP p99 (µs)", "http_p99_us", lambda x: "%.0f" % x)

    def target(label, value, goal, ok):
        return "| %s | %s | %s | %s |" % (label, value, goal, "met" if ok else "**not met**")
    targets = []
    thr_ceiling = ratio(v["throughput_gbit"], c["throughput_gbit"])
    targets.append(target("bulk throughput vs no proxy", "%.0f%%" % (100 * thr_ceiling), "≥ 80%",
                          thr_ceiling >= 0.8))
    if s:
        thr_squid = ratio(v["throughput_gbit"], s["throughput_gbit"])
        targets.append(target("bulk throughput vs squid", "%.2f×" % thr_squid, "≥ 1.6×", thr_squid >= 1.6))
        rate_squid = ratio(v["rate_per_s"], s["rate_per_s"])
        targets.append(target("setup rate vs squid", "%.2f×" % rate_squid, "≥ 2×", rate_squid >= 2))
        targets.append(target("setup p99 vs squid", "%.0f µs vs %.0f µs" % (v["rate_p99_us"], s["rate_p99_us"]),
                              "lower", v["rate_p99_us"] < s["rate_p99_us"]))
        http_squid = ratio(v["http_rps"], s["http_rps"])
        targets.append(target("keep-alive HTTP vs squid", "%.2f×" % http_squid, "≥ 3×", http_squid >= 3))
    m = results.get("matcher")
    if m:
        worst = max(m["hit"]["ratio"], m["miss"]["ratio"])
        targets.append(target("match time, 100 000 vs 10 rules", "%.2f× (hit %.1f→%.1f ns, miss %.1f→%.1f ns)" % (
            worst, m["hit"]["ns_10"], m["hit"]["ns_100000"], m["miss"]["ns_10"], m["miss"]["ns_100000"]),
            "≤ 2×", worst <= 2))
    mem = results.get("idle_memory")
    if mem:
        targets.append(target("memory per idle tunnel (%d tunnels)" % mem["tunnels"],
                              "%.1f KiB" % mem["kib_per_tunnel"], "≤ 16 KiB",
                              mem["kib_per_tunnel"] <= 16 and mem["tunnels"] >= 10000))

    write_block(path, "compare", [
        "Run: %s, %s, %d s per measurement, median of %d runs, vibepit-proxy threads=%s." % (
            results["when"], results["machine"], results["duration_s"], results["repeat"],
            results["vibepit_threads"]),
        "",
        "| measurement | no proxy (ceiling) | vibepit-proxy | squid | tinyproxy |",
        "|---|---|---|---|---|",
    ] + rows + [
        "",
        "| target | measured | goal | |",
        "|---|---|---|---|",
    ] + targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--duration", type=int, default=5, help="seconds per measurement")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is reported")
    ap.add_argument("--threads", type=int, default=0, help="vibepit-proxy threads (0 = per core)")
    ap.add_argument("--idle-count", type=int, default=10000,
                    help="idle tunnels for the memory figure; capped by the open-file limit")
    ap.add_argument("--peers", default="squid,tinyproxy", help="comma list; empty for none")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-results.json"))
    ap.add_argument("--markdown", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("compare: needs root (network namespaces)")
    netns.install_signal_cleanup()

    results = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
               "duration_s": args.duration, "repeat": args.repeat,
               "vibepit_threads": args.threads, "peers": {}}
    with BenchTopology(args.bin_dir) as topo:
        print("compare: no proxy (ceiling)", flush=True)
        results["peers"]["none"] = measure(topo, "none", args.duration, args.repeat)
        print("  ", results["peers"]["none"], flush=True)

        p, addr = start_vibepit(topo, args.threads)
        print("compare: vibepit-proxy", addr, flush=True)
        results["peers"]["vibepit"] = measure(topo, addr, args.duration, args.repeat)
        print("  ", results["peers"]["vibepit"], flush=True)
        if args.idle_count:
            # Each tunnel holds two of the proxy's descriptors; keep a margin for the rest.
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            count = min(args.idle_count, (hard - 100) // 2)
            if count < args.idle_count:
                print("compare: open-file hard limit %d caps idle tunnels at %d" % (hard, count))
            results["idle_memory"] = idle_memory(topo, p, addr, count, 5)
            results["idle_memory"]["nofile_hard_limit"] = hard
            print("   idle:", results["idle_memory"], flush=True)
        topo.stop_process(p)

        starters = {"squid": start_squid, "tinyproxy": start_tinyproxy}
        for name in [x for x in args.peers.split(",") if x]:
            p, addr = starters[name](topo)
            print("compare:", name, addr, flush=True)
            try:
                results["peers"][name] = measure(topo, addr, args.duration, args.repeat)
            except RuntimeError as e:
                print("compare: %s failed: %s" % (name, e), flush=True)
                results["peers"][name] = None
            print("  ", results["peers"][name], flush=True)
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
