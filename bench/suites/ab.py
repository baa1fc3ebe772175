"""A/B: two builds of vibepit-proxy measured in alternation, in one topology, in one run.

On a shared 2-core machine two runs of bench/suites/compare.py minutes apart can differ by 25% in
either direction, more than most changes. Here both builds run side by side in "px" (each
on its own ports, both pinned to the system-under-test core, only one under load at a
time), and every workload is measured in pairs: base then head, head then base, and so
on. A pair's ratio (head / base) sees the same minute of the machine; the median over the
pairs is the verdict, and the spread of the pair ratios says how far to trust it.

    python3 -m bench.suites.ab --base /var/tmp/base/build/bin [--head build/bin] [--pairs 8]

Workloads (as in bench/suites/compare.py and bench/suites/dns.py): CONNECT bulk, CONNECT set-up
(at saturation, and at 2 000 tunnels/s offered: setup-fixed, which also compares the p99;
setup-tls: at saturation, the first round trip a 517-byte TLS ClientHello for the tunnel's
host, which the SNI check reads),
interactive tunnels (set-up and 20 one-byte round trips each, at saturation),
keep-alive HTTP, DNS denied, cache-hit and cache-miss (at saturation, and at 10 000
queries/s offered: dns-miss-fixed, which also compares the p99). For each: the rate and the
CPU-seconds per unit (process tree plus its core's softirq, bench/lib/cpu.py). The load
generator and the servers come from --head, so only the proxy differs.

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import json
import os
import statistics
import sys

from bench.lib import ROOT
from bench.lib.dns import AUTH_ADDR, ZONES, DnsTopology, measure_latency, measure_qps, write_streams
from bench.lib.peers import Column, wait_for_listen
from bench.lib.report import publish, run_facts
from bench.lib.topology import PORTS, PROXY_ADDR
from bench.lib.workloads import metered, unit_cost
from tests.integration.harness import netns

DNS_PORTS = {"base": 53, "head": 5353}
DEFAULT_HOST = "h.cached.test"  # the proxy workloads' host: within std::string's 15 characters


def start_proxy(topo, which, bin_dir, host):
    cfg = {
        "proxy-listen": [PROXY_ADDR + ":0"],
        "dns-listen": ["%s:%d" % (PROXY_ADDR, DNS_PORTS[which])],
        "upstream-dns": [AUTH_ADDR],   # answers every name under ZONES with SERVER
        # The default host matches the wildcard; another one (--host) has an exact rule of
        # its own, which a decision reports, as a real allowlist's entry would be.
        "allow-http": ["*.cached.test:*"] if host == DEFAULT_HOST else [host + ":*"],
        "allow-dns": ZONES + ["*." + z for z in ZONES],
        "decision-log": os.path.join(topo.tmp, which + "-decisions.ndjson"),
        "threads": 1,
        "max-connections": 100000,
        "dns-client-qps": 0,
        "dns-max-pending": 100000,
    }
    path = os.path.join(topo.tmp, which + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [os.path.join(os.path.abspath(bin_dir), "vibepit-proxy"), "--config", path],
                   log=which)
    m = wait_for_listen(topo, p, which, r"listening proxy 192\.0\.2\.1:(\d+)")
    col = Column("%s:%s" % (PROXY_ADDR, m.group(1)),
                 lambda kind: "%s:%d" % (host, PORTS[kind]), p.pid)
    return p, col


def proxy_run(topo, col, workload, duration, extra=()):
    """(rate, CPU-seconds per unit) of one run; `extra`: further vibepit-bench arguments."""
    if workload == "bulk":
        args = ["connect-throughput", "--target", col.target("source"), "--streams", "4",
                "--direction", "down"]
        rate_key, units = "gbit_per_s", lambda r: r["bytes"] / 1e9
    elif workload in ("setup", "setup-fixed", "setup-tls", "interactive"):
        args = ["connect-rate", "--target", col.target("echo"), "--concurrency", "32",
                "--max", "2000000", "--linger0"]
        if workload == "setup-fixed":
            args += ["--rate", str(FIXED_TUNNELS)]  # below saturation: no batching to hide behind
        if workload == "interactive":
            args += ["--turns", str(INTERACTIVE_TURNS)]
        if workload == "setup-tls":
            args += ["--payload", "hello"]
        rate_key, units = "tunnels_per_s", lambda r: r["tunnels"] / 1e3
    else:
        args = ["http-rps", "--url", "http://%s/" % col.target("http"), "--connections", "32",
                "--max", "5000000"]
        rate_key, units = "requests_per_s", lambda r: r["requests"] / 1e3
    out = metered(topo, col, args + ["--proxy", col.proxy, "--duration", str(duration)] + list(extra),
                  duration + 60)
    if out["errors"]["total"]:
        raise RuntimeError("%s: %d errors" % (workload, out["errors"]["total"]))
    process, softirq = unit_cost(topo, out, units(out["results"]))
    if workload == "setup-fixed":  # below saturation the tail is a figure of its own
        return (out["results"][rate_key], process + (softirq or 0.0),
                out["results"]["latency_us"]["p99_us"])
    return out["results"][rate_key], process + (softirq or 0.0)


def dns_run(topo, pid, which, path, duration, fixed=False):
    """(queries/s, CPU-seconds per 1 000 queries) of one dnsperf run against `which`; with
    `fixed`, at FIXED_QUERIES offered, with the p99 (µs) as a third figure and the process's
    CPU per 1 000 queries offered (softirq is not metered at a fixed load)."""
    if fixed:
        lat, _ = measure_latency(topo, pid, path, FIXED_QUERIES, duration, DNS_PORTS[which])
        return FIXED_QUERIES, 1e3 * lat["fixed_cores"] / FIXED_QUERIES, lat["p99_us"]
    r = measure_qps(topo, pid, path, duration, DNS_PORTS[which])
    return r["qps"], r["cpu_per_1k"] + (r["softirq_per_1k"] or 0.0)


WORKLOADS = ["bulk", "setup", "setup-fixed", "setup-tls", "interactive", "http", "dns-denied", "dns-cached",
             "dns-miss", "dns-miss-fixed"]
FIXED_TUNNELS = 2000  # tunnels/s offered by setup-fixed, as in bench/suites/compare.py's fixed load
FIXED_QUERIES = 10000  # queries/s offered by dns-miss-fixed, as in bench/suites/dns.py
INTERACTIVE_TURNS = 20  # round trips per tunnel in the interactive workload
UNITS = {"bulk": ("Gbit/s", "CPU-s per GB"), "setup": ("tunnels/s", "CPU-s per 1 000 tunnels"),
         "setup-fixed": ("tunnels/s", "CPU-s per 1 000 tunnels"),
         "setup-tls": ("tunnels/s", "CPU-s per 1 000 tunnels"),
         "interactive": ("tunnels/s", "CPU-s per 1 000 tunnels"),
         "http": ("requests/s", "CPU-s per 1 000 requests")}


def summarise(pairs):
    """pairs: [(base (rate, cost), head (rate, cost))] -> the ratios and their median."""
    rate = [h[0] / b[0] for b, h in pairs]
    cost = [h[1] / b[1] for b, h in pairs]
    return {"rate_ratio": statistics.median(rate), "rate_ratios": rate,
            "cost_ratio": statistics.median(cost), "cost_ratios": cost,
            "base_cost": statistics.median(b[1] for b, _ in pairs),
            "head_cost": statistics.median(h[1] for _, h in pairs),
            "base_rate": statistics.median(b[0] for b, _ in pairs),
            "head_rate": statistics.median(h[0] for _, h in pairs),
            # p99 (µs), where the workload has one: head minus base, per pair
            "p99_diffs": [h[2] - b[2] for b, h in pairs] if len(pairs[0][0]) > 2 else None}


def num(x):
    return "%.0f" % x if x >= 1000 else "%.4g" % x


def render(res):
    lines = ["A/B run: %s, %s; base %s, head %s; %d pairs of %d s runs per workload, order "
             "alternating; each proxy pinned to core %d, the load to core %d." % (
                 res["when"], res["machine"], res["base"], res["head"], res["pairs"],
                 res["duration_s"], res["pinning"]["sut"], res["pinning"]["load"]),
             "",
             "| workload | rate: base → head (median) | head/base rate: median (range) "
             "| CPU per unit: base → head (median) | head/base CPU: median (range) |",
             "|---|---|---|---|---|"]
    for w in WORKLOADS:
        if w not in res["workloads"]:
            continue
        s = res["workloads"][w]
        unit, cost_unit = UNITS.get(w, ("queries/s", "CPU-s per 1 000 queries"))
        lines.append("| %s | %s → %s %s | %.3f (%.3f–%.3f) | %.4g → %.4g %s | %.3f (%.3f–%.3f) |" % (
            w, num(s["base_rate"]), num(s["head_rate"]), unit, s["rate_ratio"], min(s["rate_ratios"]),
            max(s["rate_ratios"]), s["base_cost"], s["head_cost"], cost_unit, s["cost_ratio"],
            min(s["cost_ratios"]), max(s["cost_ratios"])))
    for w in WORKLOADS:
        d = res["workloads"].get(w, {}).get("p99_diffs")
        if d:
            lines.append("")
            lines.append("%s p99, head minus base: median %+.0f µs (pairs %+.0f to %+.0f µs)" % (
                w, statistics.median(d), min(d), max(d)))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="bin directory of the base build")
    ap.add_argument("--head", default=os.path.join(ROOT, "build", "bin"), help="bin directory of the head build")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--duration", type=int, default=3, help="seconds per run")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-ab.json"))
    ap.add_argument("--markdown", help="also write the table as block 'ab' of this file")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated subset of: " + ", ".join(WORKLOADS))
    ap.add_argument("--host", default=DEFAULT_HOST,
                    help="the proxy workloads' host name, under cached.test (for example "
                         "registry.packages.cached.test: a real name's length)")
    args = ap.parse_args()
    if args.host != DEFAULT_HOST and not args.host.endswith(".cached.test"):
        ap.error("--host must be a name under cached.test, which the fake upstream answers")
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        ap.error("unknown workload(s): " + ", ".join(unknown))
    if os.geteuid() != 0:
        sys.exit("ab: needs root (network namespaces)")
    netns.install_signal_cleanup()
    res = {**run_facts(), "base": args.base, "head": args.head, "pairs": args.pairs, "duration_s": args.duration,
           "host": args.host,
           "workloads": {}}
    with DnsTopology(args.head, pin=True) as topo:
        res["pinning"] = topo.cpus
        streams = write_streams(topo.tmp, 400000 * args.duration)
        procs, cols = {}, {}
        for which, bin_dir in (("base", args.base), ("head", args.head)):
            procs[which], cols[which] = start_proxy(topo, which, bin_dir, args.host)
        for which in ("base", "head"):
            # Warm each: resolve the tunnel target once, fill the DNS cache.
            proxy_run(topo, cols[which], "setup", 1)
            dns_run(topo, procs[which].pid, which, streams["cached"], 1)
        for w in workloads:
            pairs = []
            for i in range(args.pairs):
                order = ("base", "head") if i % 2 == 0 else ("head", "base")
                got = {}
                for which in order:
                    if w.startswith("dns-"):
                        stream = w[4:].removesuffix("-fixed")
                        got[which] = dns_run(topo, procs[which].pid, which, streams[stream], args.duration,
                                             fixed=w.endswith("-fixed"))
                    else:
                        got[which] = proxy_run(topo, cols[which], w, args.duration)
                pairs.append((got["base"], got["head"]))
                print("ab: %-10s pair %d  base %.4g (%.4g)  head %.4g (%.4g)%s" % (
                    w, i + 1, got["base"][0], got["base"][1], got["head"][0], got["head"][1],
                    "  p99 %.0f / %.0f µs" % (got["base"][2], got["head"][2])
                    if len(got["base"]) > 2 else ""), flush=True)
            res["workloads"][w] = summarise(pairs)
            res["workloads"][w]["pairs_raw"] = pairs
    publish(res, render(res), args.json, args.markdown, "ab", "python3 -m bench.suites.ab")
    print("ab: wrote", args.json)


if __name__ == "__main__":
    main()
