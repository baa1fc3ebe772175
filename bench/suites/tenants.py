"""The cost of tenant authentication (docs/fleet.md): two vibepit-proxy processes side by side
in one run, one without tenants (a top-level rule allows the host) and one with 64 tenants
(the load authenticates as the last of them, whose own rule allows the host, so the name
lookup, the token's constant-time comparison and the tenant's matchers are all on the path).
Both are pinned to the core under test and take turns, in an order that alternates; the load
runs on the other core.

  setup  CONNECT set-up: short tunnels at saturation (connect, CONNECT with
         Proxy-Authorization, 200, one echoed byte, close)
  http   keep-alive HTTP: 32 connections, every request with Proxy-Authorization

For each: the rate and the proxy's CPU-seconds per unit (process and its core's softirq);
the figure of merit is CPU per unit with tenants over without (goal: at most 1.05).

    python3 -m bench.suites.tenants [--pairs 12] [--duration 3] [--markdown docs/benchmarks.md]

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import json
import os
import statistics
import sys

from bench.lib import ROOT
from bench.lib.dns import AUTH_ADDR, DnsTopology
from bench.lib.peers import Column, wait_for_listen
from bench.lib.report import publish, run_facts, replay
from bench.lib.stats import median_interval
from bench.lib.topology import PORTS, PROXY_ADDR
from bench.suites.ab import proxy_run
from tests.integration.harness import netns

SYSTEMS = ("plain", "tenants")
WORKLOADS = ("setup", "http")
GOAL = 1.05
HOST = "h.cached.test"
TENANTS = 64
UNITS = {"setup": ("tunnels/s", "CPU-s per 1 000 tunnels"),
         "http": ("requests/s", "CPU-s per 1 000 requests")}


def start_proxy(topo, which):
    cfg = {"proxy-listen": [PROXY_ADDR + ":0"], "upstream-dns": [AUTH_ADDR],
           "decision-log": os.path.join(topo.tmp, which + "-decisions.ndjson"), "threads": 1,
           "max-connections": 100000}
    user = None
    if which == "tenants":
        cfg["tenants"] = []
        for i in range(TENANTS):
            name, token = "team-%02d" % i, "bench-token-%02d-%s" % (i, "k" * 24)
            path = os.path.join(topo.tmp, name + ".token")
            with open(path, "w") as f:
                f.write(token)
            mine = i == TENANTS - 1
            cfg["tenants"].append({"name": name, "token-file": path,
                                   "allow-http": ["*.cached.test:*"] if mine else
                                   ["*.team-%02d.test:443" % i]})
            user = "%s:%s" % (name, token)
    else:
        cfg["allow-http"] = ["*.cached.test:*"]
    path = os.path.join(topo.tmp, which + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [topo.bin("vibepit-proxy"), "--config", path], log=which)
    m = wait_for_listen(topo, p, which, r"listening proxy 192\.0\.2\.1:(\d+)")
    col = Column("%s:%s" % (PROXY_ADDR, m.group(1)), lambda kind: "%s:%d" % (HOST, PORTS[kind]), p.pid)
    return col, (["--proxy-user", user] if user else [])


def check_authenticated(topo):
    """The runs measured what they claim: the tenants' proxy decided as the tenant."""
    for which, want in (("tenants", True), ("plain", False)):
        with open(os.path.join(topo.tmp, which + "-decisions.ndjson"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - (1 << 20)))
            tail = f.read()
        if (b'"tenant":"team-%02d"' % (TENANTS - 1) in tail) != want:
            raise RuntimeError("bench tenants: the %s proxy's records %s the tenant"
                               % (which, "lack" if want else "name"))


def render(res):
    lines = ["Run: %s, %s; each proxy (one worker) pinned to core %d, the load to core %d; %d "
             "pairs of %d s per workload, order alternating; medians, with the pairs' range."
             % (res["when"], res["machine"], res["pinning"]["sut"], res["pinning"]["load"],
                res["pairs"], res["duration_s"]),
             "",
             "| workload | proxy | rate | CPU per unit (pairs' range) | "
             "tenants ÷ none, CPU per unit: median (interval): goal ≤ %.2f |" % GOAL,
             "|---|---|---|---|---|"]
    for w in WORKLOADS:
        pairs = res["workloads"][w]
        unit, cost_unit = UNITS[w]
        for s in SYSTEMS:
            cost = [p[s][1] for p in pairs]
            ratio = ""
            if s == "tenants":
                ratios = [p["tenants"][1] / p["plain"][1] for p in pairs]
                ratio = "**%.3f**" % statistics.median(ratios)
                interval = median_interval(ratios)
                if interval:
                    low, high, _ = interval
                    word = "met" if high <= GOAL else "not met" if low > GOAL else "not resolved"
                    ratio += " (%.3f–%.3f): %s" % (low, high, word)
            lines.append("| %s | %s | %.0f %s | %.4g (%.4g–%.4g) %s | %s |" % (
                w, "64 tenants, Proxy-Authorization" if s == "tenants" else "no tenants",
                statistics.median(p[s][0] for p in pairs), unit, statistics.median(cost),
                min(cost), max(cost), cost_unit, ratio))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--duration", type=int, default=3, help="seconds per run")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-tenants.json"))
    ap.add_argument("--markdown", help="write the table into this file's block \"tenants\"")
    ap.add_argument("--render", metavar="JSON", help="only write the table again, from a kept run")
    args = ap.parse_args()
    command = "python3 -m bench.suites.tenants"
    if replay(args, render, "tenants", command):
        return
    if os.geteuid() != 0:
        sys.exit("bench tenants: needs root (network namespaces)")
    netns.install_signal_cleanup()
    res = {**run_facts(), "pairs": args.pairs, "duration_s": args.duration, "workloads": {}}
    with DnsTopology(args.bin_dir, pin=True) as topo:
        res["pinning"] = topo.cpus
        cols = {s: start_proxy(topo, s) for s in SYSTEMS}
        for s in SYSTEMS:   # warm each: the tunnel target resolved once
            col, extra = cols[s]
            proxy_run(topo, col, "setup", 1, extra)
        for w in WORKLOADS:
            pairs = []
            for i in range(args.pairs):
                order = SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]
                got = {}
                for s in order:
                    col, extra = cols[s]
                    got[s] = proxy_run(topo, col, w, args.duration, extra)
                pairs.append(got)
                print("tenants: %-5s pair %d  none %.4g (%.4g)  tenants %.4g (%.4g)" % (
                    w, i + 1, got["plain"][0], got["plain"][1], got["tenants"][0],
                    got["tenants"][1]), flush=True)
            res["workloads"][w] = pairs
        check_authenticated(topo)
    publish(res, render(res), args.json, args.markdown, "tenants", command)


if __name__ == "__main__":
    main()
