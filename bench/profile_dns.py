#!/usr/bin/env python3
"""Where a DNS server's time goes per query at a fixed load: system calls and a CPU profile.

For one server (vibepit-proxy or dnsdist, configured as bench/compare_dns.py configures
them, or one of the yardstick relays of bench/dns_shapes.py) and one query stream (denied,
cached, miss), in the pinned topology of bench/compare_dns.py, at a fixed offered load
(dnsperf -Q, 10 000 queries/s by default):

  1. latency untraced: median and p99 of a run of --duration seconds, and the core's
     microseconds per query;
  2. system calls per query: `perf trace -s` on the server for a run of the same length
     (tracepoints, which keep the pace where strace's stops would not), with the mean
     time inside each call;
  3. a profile: `perf record -e cpu-clock -g` on the server for a third such run, as the
     share of samples by symbol and the share in the kernel.

    python3 bench/profile_dns.py --system vibepit --stream denied [--qps 10000] [--duration 5]

Prints the tables (markdown) and writes them to --json. Traffic goes only to addresses
inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import compare_dns  # noqa: E402
import dns_shapes  # noqa: E402
import profile  # noqa: E402
import cpu  # noqa: E402
from harness import netns  # noqa: E402

PORTS = dns_shapes.PORTS


def fixed_load(topo, path, qps, duration, port):
    """One dnsperf run at `qps` offered; returns the queries it completed."""
    extra = ["-Q", str(qps)] + compare_dns.pass_args(path)
    out = compare_dns.dnsperf(topo, path, duration, extra, duration + 60, port)
    done = compare_dns.COMPLETED_RE.search(out)
    if not done:
        raise RuntimeError("dnsperf: " + out[-1500:])
    return int(done.group(1))


def render(res):
    per = res["queries_traced"]
    lines = ["DNS profile: %s, %s, %s stream at %d queries/s offered; the server pinned to core %d, "
             "dnsperf and the upstream to core %d." % (
                 res["when"], res["system"], res["stream"], res["qps"],
                 res["pinning"]["sut"], res["pinning"]["load"]),
             "",
             "Untraced, %d s: p50 %.0f µs, p99 %.0f µs; %.1f µs of the core per query." % (
                 res["duration_s"], res["p50_us"], res["p99_us"], res["core_us_per_query"]),
             "",
             "System calls per query (`perf trace -s` over %d queries; %.2f in all):" % (
                 per, sum(v["calls"] for v in res["syscalls"].values()) / per),
             "",
             "| syscall | per query | failed per query | mean µs in the call |", "|---|---|---|---|"]
    for name, v in sorted(res["syscalls"].items(), key=lambda kv: -kv[1]["calls"]):
        if v["calls"] / per >= 0.005:
            lines.append("| %s | %.3f | %.3f | %.1f |" % (name, v["calls"] / per, v["errors"] / per,
                                                          1e3 * v["total_ms"] / v["calls"]))
    return lines + profile.profile_lines(res, "%d s at the same load" % res["duration_s"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--system", default="vibepit", choices=sorted(PORTS))
    ap.add_argument("--stream", default="denied", choices=compare_dns.STREAMS)
    ap.add_argument("--qps", type=int, default=10000, help="offered load, queries/s")
    ap.add_argument("--duration", type=int, default=5, help="seconds of each of the three runs")
    ap.add_argument("--keep", help="also copy perf.data here, for perf report by hand")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-profile-dns.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("profile_dns: needs root (network namespaces, perf)")
    netns.install_signal_cleanup()
    res = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "system": args.system, "stream": args.stream, "qps": args.qps,
           "duration_s": args.duration}
    topo = compare_dns.DnsTopology(args.bin_dir, pin=True)
    topo.start()
    try:
        res["pinning"] = topo.cpus
        # Every run reads its stream from the start; a miss name (TTL 0) is never cached,
        # so one run's worth of them, with room, serves all four.
        paths = compare_dns.write_streams(topo.tmp, 2 * args.qps * args.duration)
        port = PORTS[args.system]
        proc = dns_shapes.start(topo, args.system)
        try:
            compare_dns.wait_udp(topo, proc, {"vibepit": "vibepit-dns"}.get(args.system, args.system), port)
            compare_dns.dnsperf(topo, paths["cached"], 2, ["-n", "2"], 60, port)  # warm the cache
            path = paths[args.stream]
            fixed_load(topo, path, args.qps, 1, port)  # warm up: allocator, the log's file
            lat, _ = compare_dns.measure_latency(topo, proc.pid, path, args.qps, args.duration, port)
            res["p50_us"], res["p99_us"] = lat["p50_us"], lat["p99_us"]
            res["core_us_per_query"] = 1e6 * lat["fixed_cores"] / args.qps
            pids = cpu.tree_pids(proc.pid)
            done = []
            res["syscalls"] = profile.syscall_summary(
                pids, lambda: done.append(fixed_load(topo, path, args.qps, args.duration, port)), topo.tmp)
            res["queries_traced"] = done[0]
            res["kernel_share"], res["dsos"], res["symbols"] = profile.perf_profile(
                pids, lambda: fixed_load(topo, path, args.qps, args.duration, port), topo.tmp, args.keep)
        finally:
            topo.stop_process(proc)
    finally:
        topo.close()
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(render(res)))


if __name__ == "__main__":
    main()
