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
import json
import os
import resource
import sys

from bench.lib.report import run_facts
from bench.lib import ROOT, cpu
from bench.lib.matcher import matcher_ratio
from bench.lib.memory import idle_memory
from bench.lib.peers import no_proxy, start_haproxy, start_squid, start_tinyproxy, start_vibepit, via_proxy
from bench.lib.proxy_tables import render
from bench.lib.rounds import measure_rounds, p99_intervals, per_round
from bench.lib.topology import BenchTopology
from tests.integration.harness import netns


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

    results = {**run_facts(), "duration_s": args.duration, "rounds": args.rounds, "repeat": args.repeat,
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
