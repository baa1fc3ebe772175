#!/usr/bin/env python3
"""Where a proxy's time goes, per unit of work: system calls and a CPU profile.

For one system (vibepit-proxy, or a peer from bench/compare.py) and one workload (CONNECT
set-up, interactive tunnels of 20 one-byte turns, keep-alive HTTP, CONNECT bulk), in the
pinned topology of bench/compare.py:

  1. system calls per unit: `strace -c -f` attached to the system for a run of a fixed
     count of units (strace slows the system; the counts do not depend on speed);
  2. a profile: `perf record -e cpu-clock -g` on the system for a timed run at full speed,
     reported as the share of samples by symbol (kernel and user), and the share in the
     kernel.

    python3 bench/profile.py --system vibepit --workload setup [--count 20000] [--duration 5]

Prints both tables (markdown) and writes them to --json. Traffic goes only to addresses
inside the namespaces this script creates.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import compare  # noqa: E402
import cpu  # noqa: E402
from harness import netns  # noqa: E402
from harness.tools import need  # noqa: E402

UNITS = {"setup": ("tunnels", 1), "interactive": ("tunnels", 1), "http": ("requests", 1),
         "bulk": ("bytes", 1e9)}
UNIT_NAME = {"setup": "tunnel", "interactive": "tunnel", "http": "request", "bulk": "GB"}
INTERACTIVE_TURNS = 20  # as in bench/ab.py


def workload_args(col, workload):
    if workload in ("setup", "interactive"):
        turns = ["--turns", str(INTERACTIVE_TURNS)] if workload == "interactive" else []
        return ["connect-rate", "--proxy", col.proxy, "--target", col.target("echo"),
                "--concurrency", "32", "--linger0"] + turns
    if workload == "http":
        return ["http-rps", "--proxy", col.proxy, "--url", "http://%s/" % col.target("http"),
                "--connections", "32"]
    return ["connect-throughput", "--proxy", col.proxy, "--target", col.target("source"),
            "--streams", "4", "--direction", "down"]


def start_system(topo, name):
    if name == "vibepit":
        p, addr = compare.start_vibepit(topo, 1)
        return p, compare.via_proxy(addr, p.pid)
    starters = {"haproxy": compare.start_haproxy, "squid": compare.start_squid,
                "tinyproxy": compare.start_tinyproxy}
    return starters[name](topo)


def attach(argv, settle=1.0):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(settle)   # strace and perf attach asynchronously
    if p.poll() is not None:
        raise RuntimeError("%s exited: %s" % (argv[0], p.stderr.read().decode()[-2000:]))
    return p


def detach(p):
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    return err.decode(errors="replace")


def syscalls(topo, col, workload, count, trace=None):
    """{syscall: calls per unit} over a run of `count` units (bulk: `count` MB). With
    `trace`, the calls themselves go to that file (strace -f -tt) instead of a count."""
    need("strace")
    out_path = trace or os.path.join(topo.tmp, "strace.txt")
    pids = cpu.tree_pids(col.pid)
    argv = ["strace", "-f", "-tt", "-o", out_path] if trace else ["strace", "-c", "-f", "-o", out_path]
    for pid in pids:
        argv += ["-p", str(pid)]
    tracer = attach(argv)
    try:
        args = workload_args(col, workload)
        if workload == "bulk":
            args += ["--duration", "3"]
        else:
            args += ["--max", str(count), "--duration", "600"]
        res = compare.bench(topo, args, 900)
    finally:
        detach(tracer)
    key, scale = UNITS[workload]
    units = res["results"][key] / scale
    table = {}
    if trace:
        return units, table
    with open(out_path) as f:
        for line in f:
            # % time, seconds, usecs/call, calls, [errors,] syscall
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?(\w+)\s*$", line)
            if m and m.group(3) != "total":
                table[m.group(3)] = {"per_unit": int(m.group(1)) / units,
                                     "errors_per_unit": int(m.group(2) or 0) / units}
    return units, table


def profile(topo, col, workload, duration, keep=None):
    """(share of samples in the kernel, [(share, dso)], [(share, k/u, symbol)]) of a timed
    run at full speed."""
    args = workload_args(col, workload) + ["--duration", str(duration)]
    if workload != "bulk":
        args += ["--max", "5000000"]
    return perf_profile(cpu.tree_pids(col.pid), lambda: compare.bench(topo, args, duration + 120),
                        topo.tmp, keep)


def perf_profile(pids, run_load, tmp, keep=None):
    """`perf record -e cpu-clock` on `pids` while `run_load()` runs: (share of samples in the
    kernel, [(share, dso)], [(share, k/u, symbol)] for symbols at 0.7% or more)."""
    need("perf")
    data = os.path.join(tmp, "perf.data")
    tracer = attach(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-g", "-o", data,
                     "-p", ",".join(str(t) for t in pids)])
    try:
        run_load()
    finally:
        detach(tracer)
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                          "--sort", "sym", "-g", "none", "--percent-limit", "0.7"],
                         capture_output=True, text=True, timeout=300).stdout
    symbols, kernel = [], 0.0
    if keep:
        shutil.copy(data, keep)
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[(.)\]\s+(.*\S)", line)
        if m:
            symbols.append((float(m.group(1)), m.group(2), m.group(3)))
    mode = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children",
                           "--sort", "dso", "-g", "none"],
                          capture_output=True, text=True, timeout=300).stdout
    dsos = []
    for line in mode.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m:
            dsos.append((float(m.group(1)), m.group(2)))
            if m.group(2).startswith("[kernel"):
                kernel += float(m.group(1))
    return kernel, dsos, symbols


def syscall_summary(pids, run_load, tmp):
    """`perf trace -s` on `pids` while `run_load()` runs (tracepoints: far lighter than
    strace's stops, so a fixed load keeps its pace): {syscall: {"calls", "errors",
    "total_ms"}}, summed over the threads."""
    need("perf")
    out = os.path.join(tmp, "perf-trace.txt")
    tracer = attach(["perf", "trace", "-s", "-o", out, "-p",
                     ",".join(str(t) for t in pids)], settle=2.0)
    try:
        run_load()
    finally:
        detach(tracer)
    table = {}
    with open(out) as f:
        for line in f:
            # syscall, calls, errors, total (msec), min, avg, max, stddev
            m = re.match(r"\s+(\w+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+", line)
            if m:
                row = table.setdefault(m.group(1), {"calls": 0, "errors": 0, "total_ms": 0.0})
                row["calls"] += int(m.group(2))
                row["errors"] += int(m.group(3))
                row["total_ms"] += float(m.group(4))
    return table


def render(res):
    unit = UNIT_NAME[res["workload"]]
    lines = ["Profile: %s, %s, %s; %s pinned to core %d, the load to core %d." % (
                 res["when"], res["system"], res["workload"], res["system"],
                 res["pinning"]["sut"], res["pinning"]["load"]),
             "",
             "System calls per %s (strace -c -f over %.4g %ss; %.1f in all):" % (
                 unit, res["units"], unit, sum(v["per_unit"] for v in res["syscalls"].values())),
             "",
             "| syscall | per %s | failed per %s |" % (unit, unit), "|---|---|---|"]
    for name, v in sorted(res["syscalls"].items(), key=lambda kv: -kv[1]["per_unit"]):
        if v["per_unit"] >= 0.01:
            lines.append("| %s | %.2f | %.2f |" % (name, v["per_unit"], v["errors_per_unit"]))
    return lines + profile_lines(res, "%d s at full speed" % res["duration_s"])


def profile_lines(res, run):
    """The CPU profile of `res` (perf_profile's figures) as markdown; `run` says what ran."""
    lines = ["", "CPU profile (perf record -e cpu-clock, %s): %.1f%% of samples in the kernel. "
             "By object: %s. Symbols at ≥ 0.7%%:" % (
                 run, res["kernel_share"],
                 ", ".join("%s %.1f%%" % (os.path.basename(d), share)
                           for share, d in res["dsos"] if share >= 0.5)),
             "", "| share | k/u | symbol |", "|---|---|---|"]
    for share, where, sym in res["symbols"]:
        lines.append("| %.1f%% | %s | `%s` |" % (share, where, sym.replace("|", "\\|")))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--system", default="vibepit", choices=["vibepit", "haproxy", "squid", "tinyproxy"])
    ap.add_argument("--workload", default="setup", choices=sorted(UNITS))
    ap.add_argument("--count", type=int, default=20000, help="units traced by strace")
    ap.add_argument("--duration", type=int, default=5, help="seconds profiled by perf")
    ap.add_argument("--keep", help="also copy perf.data here, for perf report by hand")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-profile.json"))
    ap.add_argument("--trace", help="write every system call of a run of --count units to this "
                    "file (strace -f -tt) and stop there: no counts, no profile")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("profile: needs root (network namespaces, strace, perf)")
    netns.install_signal_cleanup()
    res = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "system": args.system, "workload": args.workload, "duration_s": args.duration}
    with compare.BenchTopology(args.bin_dir, pin=True) as topo:
        res["pinning"] = topo.cpus
        p, col = start_system(topo, args.system)
        # Warm up: the name is resolved and cached, allocator arenas are in place.
        compare.bench(topo, workload_args(col, args.workload) + ["--duration", "1"], 120)
        if args.trace:
            syscalls(topo, col, args.workload, args.count, os.path.abspath(args.trace))
            topo.stop_process(p)
            print("profile: wrote", args.trace)
            return
        res["units"], res["syscalls"] = syscalls(topo, col, args.workload, args.count)
        res["kernel_share"], res["dsos"], res["symbols"] = profile(topo, col, args.workload,
                                                                   args.duration, args.keep)
        topo.stop_process(p)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(render(res)))


if __name__ == "__main__":
    main()
