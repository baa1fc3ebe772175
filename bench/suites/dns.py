"""Side-by-side DNS benchmark in network namespaces, all in one run.

Topology: as bench/suites/compare.py. dnsperf runs in "sb" (the sandbox's place) and queries the
server under test on 192.0.2.1:53 in "px". Every server forwards to the same fast
authoritative upstream, `vibepit-bench dns-auth` on 198.51.100.53:53 in "net", which
answers names under cached.test (TTL 3600) and miss.test (TTL 0, so nothing may cache
them) with one A record.

The servers, each with the same allowlist (cached.test and miss.test and their
subdomains; everything else refused): vibepit-proxy, dnsmasq, unbound, dnsdist.

Three query streams:
  denied  names outside the allowlist (d<i>.denied.test): refused without forwarding
  cached  100 allowed names, warmed first, answered from each server's cache
  miss    unique allowed names (m<i>.miss.test, TTL 0): every query goes upstream
For each stream: queries per second at saturation (dnsperf, median of --repeat runs), then
median and p99 latency at a fixed offered load that every server sustains (dnsperf -Q, -v).

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import os
import statistics

from bench.lib import ROOT, cpu, stats
from bench.lib.dns import (SERVER_PORTS, STREAMS, DnsTopology, dnsperf, measure_latency, measure_qps, start_dnsdist,
                           start_dnsmasq, start_unbound, start_vibepit, wait_udp, write_streams)
from bench.lib.report import write_block
from tests.integration.harness import netns


def measure_rounds(topo, servers, paths, args):
    """Every stream against every server, interleaved: each round runs, per stream, the
    saturating runs (`--repeat` each) and then the fixed-load run against each server in an
    order that rotates by one server per round. The servers a target compares are measured
    seconds apart, so the machine's drift over minutes stays out of the comparison.

    servers: name -> (process, port). Returns (name -> stream -> figures, and name -> stream ->
    one figure per round: CPU-s per 1 000 queries, p50 and p99 µs). Each latency target's
    difference gets a bootstrap interval (stats.quantile_interval) in the figures, under
    "intervals"; its units are thirds of each round's fixed-load run, in dnsperf's order."""
    names = list(servers)
    runs = {n: {s: {"qps": [], "lat": []} for s in STREAMS} for n in names}
    units = {n: {s: [] for s in STREAMS} for n in names}  # every query's latency, in thirds of each run
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for stream in STREAMS:
            for n in order:
                proc, port = servers[n]
                runs[n][stream]["qps"].append([measure_qps(topo, proc.pid, paths[stream], args.duration, port)
                                               for _ in range(args.repeat)])
            for n in order:
                proc, port = servers[n]
                lat, each = measure_latency(topo, proc.pid, paths[stream], args.latency_qps, 3, port)
                runs[n][stream]["lat"].append(lat)
                units[n][stream] += [each[i * len(each) // 3:(i + 1) * len(each) // 3] for i in range(3)]
                print("compare-dns: round %d %-8s %-6s %9.0f qps  p50 %6.0f µs  p99 %6.0f µs  %s" % (
                    rnd + 1, n, stream, runs[n][stream]["qps"][-1][0]["qps"], lat["p50_us"], lat["p99_us"],
                    runs[n][stream]["qps"][-1][0]["rcodes"]), flush=True)
    cost = lambda r: r["cpu_per_1k"] + (r["softirq_per_1k"] or 0.0)
    figures, per_round = {}, {}
    for n in names:
        figures[n], per_round[n] = {}, {}
        for stream in STREAMS:
            qps = [r for batch in runs[n][stream]["qps"] for r in batch]
            lat = runs[n][stream]["lat"]
            med = stats.median_run(qps, lambda r: r["qps"])
            # The fixed-load percentiles are of every round's queries pooled; each round's p99
            # is kept beside them.
            pooled = stats.pooled([x for u in units[n][stream] for x in u])
            figures[n][stream] = {
                "qps": med["qps"], "qps_runs": [r["qps"] for r in qps],
                "lost": med["lost"], "rcodes": med["rcodes"],
                "cpu_per_1k": stats.median(r["cpu_per_1k"] for r in qps),
                "softirq_per_1k": stats.median(r["softirq_per_1k"] for r in qps),
                "p50_us": pooled["p50_us"], "p99_us": pooled["p99_us"],
                "p99_runs": [x["p99_us"] for x in lat],
                "samples": sum(x["samples"] for x in lat),
                "fixed_cores": stats.median(x["fixed_cores"] for x in lat)}
            per_round[n][stream] = {
                "cost": [stats.median(cost(r) for r in batch) for batch in runs[n][stream]["qps"]],
                "p50_us": [x["p50_us"] for x in lat], "p99_us": [x["p99_us"] for x in lat]}
    for who in ("vibepit", "dnsdist-again"):
        if who in names and "dnsdist" in names:
            for stream, key in LATENCY_TARGETS:
                interval = stats.quantile_interval([u for u in units[who][stream] if u],
                                                   [u for u in units["dnsdist"][stream] if u],
                                                   q=0.5 if key == "p50_us" else 0.99)
                if interval:
                    figures[who][stream].setdefault("intervals", {})[key] = interval
    return figures, per_round


# The latency targets against dnsdist: (stream, figure).
LATENCY_TARGETS = (("miss", "p99_us"), ("denied", "p50_us"), ("denied", "p99_us"))


# ------------------------------------------------------------------ report

def render(results, path):
    peers = results["peers"]
    names = [n for n in ["vibepit", "dnsmasq", "unbound", "dnsdist", "dnsdist-again"] if n in peers]
    labels = {"vibepit": "vibepit-proxy", "dnsdist-again": "dnsdist again (A/A)"}
    rows = []
    for stream in STREAMS:
        for key, label, fmt in (("qps", "queries/s", "%.0f"),
                                ("cpu_per_1k", "CPU-s per 1 000, process", "%.4f"),
                                ("softirq_per_1k", "CPU-s per 1 000, softirq", "%.4f"),
                                ("p50_us", "p50 µs at fixed load, rounds pooled", "%.0f"),
                                ("p99_us", "p99 µs at fixed load, rounds pooled", "%.0f"),
                                ("fixed_cores", "cores busy at fixed load", "%.2f")):
            cells = [fmt % peers[n][stream][key] if peers[n][stream].get(key) is not None else "-"
                     for n in names]
            rows.append("| %s %s | %s |" % (stream, label, " | ".join(cells)))
    for key, label, fmt in (("wakeups_per_s", "at rest (no traffic): wake-ups per second", "%.1f"),
                            ("cpu_ms_per_min", "at rest: CPU-ms per minute", "%.0f")):
        cells = [fmt % peers[n]["at_rest"][key] if peers[n].get("at_rest") else "-" for n in names]
        rows.append("| %s | %s |" % (label, " | ".join(cells)))

    def target(label, judged, value, goal):
        return "| %s | %s | %s | %s |" % (label, value, goal, judged)
    rounds = results.get("per_round", {})
    t = []
    if "dnsdist" in rounds:
        v, d = rounds["vibepit"], rounds["dnsdist"]
        for stream in STREAMS:
            p = list(zip(v[stream]["cost"], d[stream]["cost"]))
            ratios = [a / b for a, b in p]
            r = statistics.median(ratios)
            t.append(target("%s: CPU-s per 1 000 queries vs dnsdist" % stream,
                            stats.verdict(r, stats.median_interval(ratios), lambda v: v <= 1),
                            "%.2f× (%.4f vs %.4f%s)" % (r, statistics.median(a for a, _ in p),
                                                        statistics.median(b for _, b in p),
                                                        stats.spread(ratios, "%.2f×")), "≤ 1×"))
        for stream, key in LATENCY_TARGETS:
            # Pooled over the rounds (as the table); the per-round differences for spread.
            # With the A/A pair, the same comparison between the two dnsdists follows.
            for who, label, goal in (("vibepit", "%s: %s at %d q/s vs dnsdist", "≤ dnsdist's"),
                                     ("dnsdist-again", "(A/A) %s: %s at %d q/s, dnsdist again vs dnsdist",
                                      "what the machine cannot tell apart")):
                if who not in rounds:
                    continue
                a, b = peers[who][stream][key], peers["dnsdist"][stream][key]
                diffs = [x - y for x, y in zip(rounds[who][stream][key], d[stream][key])]
                interval = peers[who][stream].get("intervals", {}).get(key)
                within = "; 95%% interval %+.0f to %+.0f" % tuple(interval) if interval else ""
                judged = (stats.verdict(a - b, interval, lambda diff: diff <= 0) if who == "vibepit"
                          else stats.pair_verdict(interval, 0))
                t.append(target(label % (stream, key.replace("_us", ""), results["latency_qps"]), judged,
                                "%.0f vs %.0f µs pooled, difference %+.0f µs%s%s" % (
                                    a, b, a - b, within, stats.spread(diffs, "%+.0f", median=False)), goal))
    pin = results.get("pinning")
    where = ("each server pinned to core %d, dnsperf and the upstream to core %d" % (pin["sut"], pin["load"])
             if pin else "not pinned")
    write_block(path, "compare-dns", [
        "Run: %s, %s, %d rounds, the servers interleaved within each; per round and stream %d "
        "throughput run(s) of %d s and one 3 s run at %d queries/s offered; vibepit-proxy "
        "threads=%s; %s." % (
            results["when"], results["machine"], results.get("rounds", 1), results["repeat"],
            results["duration_s"], results["latency_qps"], results["vibepit_threads"], where),
        "",
        "| stream | %s |" % " | ".join(labels.get(n, n) for n in names),
        "|---|%s" % ("---|" * len(names)),
    ] + rows + ["", "Targets (CPU compared as process + softirq; a CPU ratio is the median of the "
                "per-round ones, with a %.0f%%-or-better interval for that median from the rounds' "
                "order statistics (from 5 rounds up); a latency difference is that of every round's "
                "queries pooled, with a 95%% bootstrap interval; the per-round range beside each. A "
                "target is met or not met when its whole interval lies on one side of the goal, and "
                "not resolved when the goal lies inside it: the run cannot tell):"
                % (100 * stats.MEDIAN_LEVEL), "",
                "| target | measured | goal | |", "|---|---|---|---|"] + t, heading="## DNS\n\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--duration", type=int, default=5, help="seconds per throughput run")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds; each runs every stream against every server, interleaved. A CPU "
                         "target gets an interval for its median from 5 rounds up")
    ap.add_argument("--repeat", type=int, default=1, help="throughput runs per stream and server per round")
    ap.add_argument("--latency-qps", type=int, default=10000, help="offered load for the latency runs")
    ap.add_argument("--threads", type=int, default=1,
                    help="vibepit-proxy threads (0 = per core); 1 matches the one core it is pinned to")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the server under test and the load to different cores")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="an extra vibepit-proxy config key, e.g. decision-log-per-client=0")
    ap.add_argument("--peers", default="dnsmasq,unbound,dnsdist,dnsdist-again",
                    help="comma list; empty for none (dnsdist-again: the A/A pair's second)")
    ap.add_argument("--rest", type=float, default=10.0,
                    help="seconds each server is watched with no traffic (wake-ups, CPU at rest)")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-dns-results.json"))
    ap.add_argument("--markdown", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--render", metavar="JSON",
                    help="measure nothing: write the tables of a run kept in JSON to --markdown")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            render(json.load(f), args.markdown)
        return

    topo = DnsTopology(args.bin_dir, pin=not args.no_pin)
    netns.install_signal_cleanup()
    topo.start()
    try:
        paths = write_streams(topo.tmp, 400000 * args.duration)
        starters = {"vibepit": lambda port: start_vibepit(topo, args.threads, args.set, port),
                    "dnsmasq": lambda port: start_dnsmasq(topo, port),
                    "unbound": lambda port: start_unbound(topo, 1 if topo.cpus else 2, port),
                    "dnsdist": lambda port: start_dnsdist(topo, port),
                    "dnsdist-again": lambda port: start_dnsdist(topo, port, "dnsdist-again")}
        servers = {}
        try:
            for name in ["vibepit"] + [p for p in args.peers.split(",") if p]:
                port = SERVER_PORTS[name]
                proc = starters[name](port)
                servers[name] = (proc, port)
                wait_udp(topo, proc, {"vibepit": "vibepit-dns"}.get(name, name), port)
            # Before any load, over one window: what each costs at rest.
            rest = cpu.at_rest_all({n: p.pid for n, (p, _) in servers.items()}, args.rest)
            for proc, port in servers.values():   # warm each cache: every cached name, twice
                dnsperf(topo, paths["cached"], 2, ["-n", "2"], 60, port)
            peers, per_round = measure_rounds(topo, servers, paths, args)
            for n in peers:
                peers[n]["at_rest"] = rest[n]
        finally:
            for proc, _ in servers.values():
                topo.stop_process(proc)
    finally:
        topo.close()
    results = {
        "when": datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
        "duration_s": args.duration, "rounds": args.rounds, "repeat": args.repeat,
        "latency_qps": args.latency_qps, "vibepit_threads": args.threads, "pinning": topo.cpus,
        "peers": peers, "per_round": per_round,
    }
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    render(results, args.markdown)
    print("compare-dns: wrote %s and %s" % (args.json, args.markdown))


if __name__ == "__main__":
    main()
