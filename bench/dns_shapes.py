#!/usr/bin/env python3
"""Does the forwarder's shape set the DNS tail? One stream at a fixed load, interleaved rounds.

In the pinned topology of bench/compare_dns.py, each round sends one stream (miss by default)
at a fixed offered load (dnsperf -Q) for 3 s to each of, in a new random order per round:

  vibepit        vibepit-proxy, configured as compare_dns.py configures it
  dnsdist        dnsdist 1.7, likewise
  relay-epoll    `vibepit-bench dns-relay --shape epoll`: the least a forwarder can do, on one
                 thread's event loop (epoll_wait, then recvmmsg), vibepit-proxy's shape
  relay-threads  `vibepit-bench dns-relay --shape threads`: the same work, a thread blocking
                 in recvmmsg per socket, dnsdist's shape
  vibepit-log-elsewhere  with --log-elsewhere: a second vibepit-proxy, the same but for its
                 decision log's writer thread ("vp-log"), which is moved to the load's core
                 once it runs. The server's own core is then the I/O thread's alone, as on a
                 host with a core to spare; what separates the two vibepit columns is what
                 sharing the one pinned core with the record's writer costs the tail. (The
                 writer's time on the load's core is still counted as the server's.)

and prints, from every round's queries pooled, each one's p50, p99 and p99.9, the core it kept
busy, and the p99 differences that separate the questions: what the shape costs (relay-epoll
minus relay-threads), what vibepit-proxy's work costs in its shape (vibepit minus
relay-epoll), and what dnsdist's costs in its own (dnsdist minus relay-threads), each with
a 95% bootstrap interval over thirds of the runs (compare.quantile_interval).

    sudo python3 bench/dns_shapes.py [--rounds 8] [--stream miss] [--qps 10000]

The relays forward every query, whatever the stream: only the miss stream, which every
server forwards too, compares like with like. Writes the figures to --json. Traffic goes
only to addresses inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import compare  # noqa: E402
import compare_dns  # noqa: E402
from harness import netns  # noqa: E402

PORTS = {"vibepit": compare_dns.SERVER_PORTS["vibepit"], "dnsdist": compare_dns.SERVER_PORTS["dnsdist"],
         "relay-epoll": 5306, "relay-threads": 5307}
ELSEWHERE = "vibepit-log-elsewhere"
ELSEWHERE_PORT = 5308
# (a, b): the p99 differences reported, a minus b.
PAIRS = (("relay-epoll", "relay-threads"), ("vibepit", "relay-epoll"),
         ("dnsdist", "relay-threads"), ("vibepit", "dnsdist"))
RUN_S = 3


def start(topo, name):
    port = PORTS[name]
    if name == "vibepit":
        return compare_dns.start_vibepit(topo, 1, port=port)
    if name == ELSEWHERE:  # its own proxy port, log and config; the writer is moved once it runs
        return compare_dns.start_vibepit(topo, 1, port=port, extra=(
            'proxy-listen=["%s:3131"]' % compare_dns.LISTEN,
            'decision-log="%s"' % os.path.join(topo.tmp, "dns-decisions-elsewhere.ndjson")))
    if name == "dnsdist":
        return compare_dns.start_dnsdist(topo, port)
    shape = name.split("-", 1)[1]
    return topo.popen(topo.px, [topo.bin("vibepit-bench"), "dns-relay", "--shape", shape,
                                "--listen", "%s:%d" % (compare_dns.LISTEN, port),
                                "--upstream", compare_dns.AUTH_ADDR + ":53", "--duration", "7200"],
                      log=name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--stream", default="miss", choices=compare_dns.STREAMS)
    ap.add_argument("--qps", type=int, default=10000, help="offered load, queries/s")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-dns-shapes.json"))
    ap.add_argument("--log-elsewhere", action="store_true",
                    help="also run vibepit-proxy with its log writer on the load's core")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("dns_shapes: needs root (network namespaces)")
    if args.log_elsewhere:
        PORTS[ELSEWHERE] = ELSEWHERE_PORT
    netns.install_signal_cleanup()
    topo = compare_dns.DnsTopology(args.bin_dir, pin=True)
    topo.start()
    procs = {}
    lat = {n: [] for n in PORTS}     # every query's latency, in thirds of each run
    cores = {n: [] for n in PORTS}   # the core each kept busy, per run
    try:
        paths = compare_dns.write_streams(topo.tmp, 2 * args.qps * RUN_S)
        path = paths[args.stream]
        for name in PORTS:
            procs[name] = start(topo, name)
            label = "vibepit-dns" if name in ("vibepit", ELSEWHERE) else name
            compare_dns.wait_udp(topo, procs[name], label, PORTS[name])
        if ELSEWHERE in procs:  # the topology is always pinned here (pin=True above)
            compare.move_log_writer(topo, procs[ELSEWHERE].pid, "dns_shapes")
        for name in PORTS:  # warm up: caches, the allocator, the log's file
            compare_dns.dnsperf(topo, paths["cached"], 2, ["-n", "2"], 60, PORTS[name])
            compare_dns.measure_latency(topo, procs[name].pid, path, args.qps, 1, PORTS[name])
        for rnd in range(args.rounds):
            order = list(PORTS)
            random.shuffle(order)
            for name in order:
                one, each = compare_dns.measure_latency(topo, procs[name].pid, path, args.qps, RUN_S,
                                                        PORTS[name])
                lat[name] += [each[i * len(each) // 3:(i + 1) * len(each) // 3] for i in range(3)]
                cores[name].append(one["fixed_cores"])
                print("dns-shapes: round %d %-13s p50 %5.0f µs  p99 %5.0f µs  cores %.3f" % (
                    rnd + 1, name, one["p50_us"], one["p99_us"], one["fixed_cores"]), flush=True)
    finally:
        for p in procs.values():
            topo.stop_process(p)
        topo.close()
    res = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
           "stream": args.stream, "qps": args.qps, "rounds": args.rounds, "pinning": topo.cpus,
           "systems": {}, "p99_differences": {}}
    lines = ["DNS shapes: %s, %s, %s stream at %d queries/s, %d rounds of %d s, every round's "
             "queries pooled." % (res["when"], res["machine"], args.stream, args.qps, args.rounds, RUN_S), "",
             "| system | p50 µs | p99 µs | p99.9 µs | core busy | core µs per query |", "|---|---|---|---|---|---|"]
    for n in PORTS:
        pl = compare.pooled([x for u in lat[n] for x in u])
        busy = compare.median(cores[n])
        res["systems"][n] = {"p50_us": pl["p50_us"], "p99_us": pl["p99_us"], "p999_us": pl["p999_us"],
                             "count": pl["count"], "cores": busy, "cores_runs": cores[n]}
        lines.append("| %s | %.0f | %.0f | %.0f | %.3f | %.1f |" % (
            n, pl["p50_us"], pl["p99_us"], pl["p999_us"], busy, 1e6 * busy / args.qps))
    lines += ["", "| p99, a minus b | µs | 95% interval |", "|---|---|---|"]
    pairs = PAIRS + (((ELSEWHERE, "dnsdist"), ("vibepit", ELSEWHERE)) if ELSEWHERE in PORTS else ())
    for a, b in pairs:
        d = res["systems"][a]["p99_us"] - res["systems"][b]["p99_us"]
        iv = compare.quantile_interval([u for u in lat[a] if u], [u for u in lat[b] if u])
        res["p99_differences"]["%s-%s" % (a, b)] = {"us": d, "interval": iv}
        lines.append("| %s − %s | %+.0f | %s |" % (a, b, d, "%+.0f to %+.0f" % tuple(iv) if iv else "-"))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
