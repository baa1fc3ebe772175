"""Where the set-up p99 at a fixed load comes from: every tunnel's latency, not only the
percentiles, through vibepit-proxy and haproxy's relay, in the pinned topology of
bench/suites/compare.py.

    sudo python3 -m bench.suites.tail [--rounds 3] [--duration 10] [--rate 2000]

First, with no load, a probe on each core: a busy loop that reads the clock and counts the
gaps in which something else had the core (the machine's own stalls, which both systems
under test meet alike). Then rounds of `vibepit-bench connect-rate --rate R --samples F`,
the systems interleaved, the order rotating by one each round. From the pooled samples of
each system:

- percentiles, and how many tunnels took longer than 0.5, 1 and 2 ms;
- the stalls: slow tunnels (over 2 ms) grouped when they started within 3 ms of each other,
  how many such groups a second and how many tunnels each caught;
- the slow tunnels (over 0.5 ms) split into those in the shadow of a stall (within 8 ms
  after or 3 ms before a tunnel over 2 ms) and those alone;
- for vibepit-proxy, the share of a tunnel's latency spent before the 200.

With --log-elsewhere, one more column: a second vibepit-proxy, the same but for its
decision log's writer thread ("vp-log"), which is moved to the load's core, so that the core
under test belongs to the I/O thread alone.

vibepit-proxy runs twice per round: as a client uses it (CONNECT, wait for the 200, send),
and with the client's byte sent along with the CONNECT, so that the client waits once, as
a relay's client does. haproxy runs twice too, as two instances with identical
configurations (an A/A pair): the difference between their p99s is what this machine
cannot tell apart, the yardstick for every other difference in the table.

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import bisect
import datetime
import os
import shutil
import subprocess
import sys

from bench.lib import ROOT
from bench.lib.peers import move_log_writer, start_haproxy, start_vibepit, via_proxy
from bench.lib.report import publish
from bench.lib.stats import pooled
from bench.lib.topology import BenchTopology
from bench.lib.workloads import bench, metered, read_samples
from tests.integration.harness import netns

STALL_US = 2000   # a tunnel this slow waited through a stall
SLOW_US = 500     # about twice the median through either system
GROUP_US = 3000   # slow tunnels that started this close together met the same stall
AGAIN = "haproxy again"  # the second instance of the same relay
BASE = "vibepit-proxy, base"  # --base: another build, run as the first column is
ELSEWHERE = "vibepit, log elsewhere"  # --log-elsewhere: its decision-log writer on the load's core

PROBE = r"""
import sys, time
end = time.monotonic() + float(sys.argv[1]); prev = time.monotonic(); gaps = []
while prev < end:
    now = time.monotonic()
    if now - prev > 0.0005: gaps.append(now - prev)
    prev = now
print(len(gaps), sum(1 for g in gaps if g > 0.002), max(gaps, default=0))
"""


def probe_cores(cores, seconds):
    """{core: (gaps over 0.5 ms per second, over 2 ms per second, longest in ms)}, all cores at once."""
    procs = {c: subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", PROBE, str(seconds)],
                                 stdout=subprocess.PIPE) for c in cores}
    out = {}
    for c, p in procs.items():
        n, big, longest = p.communicate(timeout=seconds + 30)[0].split()
        out[c] = (int(n) / seconds, int(big) / seconds, float(longest) * 1e3)
    return out


def analyse(runs, duration):
    """Figures of one system from its runs' samples (lists of (start, total, setup) in µs)."""
    lat = [t for rows in runs for _, t, _ in rows]
    n = len(lat)
    if n == 0:
        return {"tunnels": 0}
    pct = pooled(lat)
    res = {"tunnels": n, **{k: v for k, v in pct.items() if k != "count"},
           "over_pct": {str(x): 100.0 * sum(1 for v in lat if v > x) / n for x in (500, 1000, 2000)}}
    groups, sizes, shadowed, alone, setup_share = 0, [], 0, 0, []
    for rows in runs:
        stalls = [s for s, t, _ in rows if t > STALL_US]
        last = None
        for s in stalls:
            if last is None or s - last >= GROUP_US:
                groups += 1
                sizes.append(0)
            sizes[-1] += 1
            last = s
        for s, t, setup in rows:
            if t <= SLOW_US:
                continue
            i = bisect.bisect_left(stalls, s - 8000)
            if i < len(stalls) and stalls[i] <= s + 3000:
                shadowed += 1
            else:
                alone += 1
            setup_share.append(setup / t)
    sizes.sort()
    res["stalls_per_s"] = groups / (duration * len(runs))
    res["tunnels_per_stall_median"] = sizes[len(sizes) // 2] if sizes else 0
    res["slow_near_a_stall"] = shadowed
    res["slow_alone"] = alone
    res["slow_setup_share"] = sum(setup_share) / len(setup_share) if setup_share else None
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10, help="seconds per run")
    ap.add_argument("--rate", type=int, default=2000, help="tunnels started per second")
    ap.add_argument("--probe", type=int, default=10, help="seconds of the idle probe (0: none)")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-tail.json"))
    ap.add_argument("--markdown", help="also write the table as block 'tail' of this file")
    ap.add_argument("--keep", help="also copy every run's samples into this directory")
    ap.add_argument("--base", help="also run the vibepit-proxy of this bin dir (a build to "
                    "compare against, as bench/suites/ab.py's --base) as a column of its own")
    ap.add_argument("--log-elsewhere", action="store_true",
                    help="also run a second vibepit-proxy whose decision-log writer thread is "
                    "moved to the load's core: what sharing the core under test with it costs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("tail: needs root (network namespaces)")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    netns.install_signal_cleanup()
    out = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "rate": args.rate, "duration_s": args.duration, "rounds": args.rounds}
    with BenchTopology(args.bin_dir, pin=True) as topo:
        out["pinning"] = topo.cpus
        if args.probe:
            out["idle_probe"] = {str(c): v for c, v in
                                 probe_cores(sorted(set(topo.cpus.values())), args.probe).items()}
        p, addr = start_vibepit(topo, 1)
        proxy = via_proxy(addr, p.pid)
        # The second vibepit-proxy column sends the client's byte with the CONNECT, so that
        # its client waits once, as a relay's does (--pipeline): the protocol's extra turn out.
        # The second haproxy is the same relay again: the A/A pair.
        cols = {"vibepit-proxy": (proxy, [])}
        if args.base:
            bp, baddr = start_vibepit(
                topo, 1, os.path.join(os.path.abspath(args.base), "vibepit-proxy"), "base")
            cols[BASE] = (via_proxy(baddr, bp.pid), [])
        if args.log_elsewhere:
            ep, eaddr = start_vibepit(topo, 1, name="elsewhere")
            move_log_writer(topo, ep.pid, "tail")
            cols[ELSEWHERE] = (via_proxy(eaddr, ep.pid), [])
        cols.update({"vibepit, pipelined": (proxy, ["--pipeline"]),
                     "haproxy": (start_haproxy(topo)[1], []),
                     AGAIN: (start_haproxy(topo, 1)[1], [])})
        base = ["connect-rate", "--concurrency", "32", "--linger0", "--max", "2000000"]
        for col, _ in cols.values():  # warm-up: the name is resolved and cached
            bench(topo, base + ["--proxy", col.proxy, "--target", col.target("echo"),
                                "--duration", "1"], 60)
        samples = {name: [] for name in cols}
        cpu = {name: [] for name in cols}
        p99 = {name: [] for name in cols}
        for r in range(args.rounds):
            order = list(cols.items())
            order = order[r % len(order):] + order[:r % len(order)]  # each takes every place
            for name, (col, extra) in order:
                path = os.path.join(topo.tmp, "samples-%s-%d.txt" % (name, r))
                run = metered(topo, col, base + [
                    "--proxy", col.proxy, "--target", col.target("echo"), "--duration",
                    str(args.duration), "--rate", str(args.rate), "--samples", path] + extra,
                    args.duration + 60)
                samples[name].append(read_samples(path))
                cpu[name].append(run["cpu"]["process_s"])
                if args.keep:
                    shutil.copy(path, args.keep)
                lat = run["results"]["latency_us"]
                p99[name].append(lat.get("p99_us"))
                print("tail: round %d %-18s p50 %5s p99 %5s µs" % (r + 1, name, lat.get("p50_us"),
                                                                   lat.get("p99_us")), flush=True)
    out["systems"] = {name: dict(analyse(runs, args.duration), p99_rounds_us=p99[name],
                                 cpu_rounds=[1000 * c / max(1, len(x)) for c, x in zip(cpu[name], runs)],
                                 cpu_s_per_1000=1000 * sum(cpu[name]) / max(1, sum(len(x) for x in runs)))
                      for name, runs in samples.items()}
    publish(out, render(out), args.json, args.markdown, "tail", "python3 -m bench.suites.tail")


def render(out):
    lines = ["Tail run: %s, %d tunnels/s offered, %d rounds of %d s per system." % (
        out["when"], out["rate"], out["rounds"], out["duration_s"])]
    for core, (gaps, big, longest) in sorted(out.get("idle_probe", {}).items()):
        role = [k for k, v in out["pinning"].items() if str(v) == core]
        lines.append("Idle probe, core %s (%s): %.1f gaps over 0.5 ms a second, %.1f over 2 ms, "
                     "the longest %.1f ms." % (core, ",".join(role), gaps, big, longest))
    names = list(out["systems"])
    lines += ["", "| pooled over the rounds | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]
    rows = [("tunnels", "tunnels", "%d"), ("p50 (µs)", "p50_us", "%d"), ("p90 (µs)", "p90_us", "%d"),
            ("p99 (µs)", "p99_us", "%d"), ("p99.9 (µs)", "p999_us", "%d"),
            ("stalls a second (tunnels over 2 ms, grouped)", "stalls_per_s", "%.1f"),
            ("tunnels caught per stall (median)", "tunnels_per_stall_median", "%d"),
            ("tunnels over 0.5 ms near a stall", "slow_near_a_stall", "%d"),
            ("tunnels over 0.5 ms alone", "slow_alone", "%d"),
            ("their latency before the 200 (share)", "slow_setup_share", "%.2f"),
            ("CPU-s per 1 000 tunnels (process)", "cpu_s_per_1000", "%.3f")]
    base = out["systems"]["haproxy"]
    for label, key, fmt in rows:
        cells = []
        for n in names:
            v = out["systems"][n].get(key)
            cells.append("-" if v is None or (key == "slow_setup_share" and n not in ("vibepit-proxy", BASE, ELSEWHERE))
                         else fmt % v)
        lines.append("| %s | %s |" % (label, " | ".join(cells)))
    lines.append("| pooled p99 minus haproxy's (µs) | %s |" % " | ".join(
        "%+d" % (out["systems"][n]["p99_us"] - base["p99_us"]) if n != "haproxy" else "-"
        for n in names))
    lines.append("| each round's p99 minus haproxy's (µs) | %s |" % " | ".join(
        ", ".join("%+d" % (a - b) for a, b in zip(out["systems"][n]["p99_rounds_us"],
                                                  base["p99_rounds_us"]) if a and b)
        if n != "haproxy" else "-" for n in names))
    lines.append("| p99 of each round (µs) | %s |" % " | ".join(
        ", ".join(str(v) for v in out["systems"][n]["p99_rounds_us"]) for n in names))
    lines.append("| CPU-s per 1 000 tunnels, each round | %s |" % " | ".join(
        ", ".join("%.3f" % v for v in out["systems"][n]["cpu_rounds"]) for n in names))
    for x in ("500", "1000", "2000"):
        lines.append("| share over %s µs (%%) | %s |" % (x, " | ".join(
            "%.2f" % out["systems"][n]["over_pct"][x] for n in names)))
    return lines


if __name__ == "__main__":
    main()
