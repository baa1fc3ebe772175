#!/usr/bin/env python3
"""User-space instructions per unit of work: vibepit-proxy under callgrind, a count that
does not move with the machine.

CPU time per unit (bench/compare.py, bench/ab.py) is what a user pays, but on a shared
2-core machine two runs minutes apart differ by 5% or more, and 80% of a tunnel's time is
the kernel's: a change to the proxy's own code that saves 3% of its cost is lost in that
noise. Callgrind counts the instructions each thread executes in user space (libc and
Asio included, the kernel not), the same for the same binary and workload whatever else
the machine does. It is the yardstick for user-space work; the CPU ratios stay the verdict.

The proxy runs under `valgrind --tool=callgrind` in the pinned topology of
bench/compare.py, with instrumentation off. After a warm-up (the name resolved and cached,
buffers and allocator arenas in place), collection is switched on for exactly --count
units of the workload, then the counts are dumped, per thread:

    python3 bench/instructions.py [--bin-dir build/bin] [--workload setup] [--count 2000]
    python3 bench/instructions.py --system haproxy    # the relay floor's, for scale

The I/O thread (one: threads 1) does a unit's work, and its count per unit is the figure.
The decision log's writer is reported beside it: it polls on a timer, so part of its count
follows time (slowed some 50x under valgrind), not work. Traffic goes only to addresses
inside the namespaces this script creates.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import compare  # noqa: E402
import profile  # noqa: E402
from harness import netns  # noqa: E402
from harness.tools import need  # noqa: E402

CONCURRENCY = 8  # the proxy runs ~50x slower under valgrind: fewer clients, same work each


def load_args(col, workload, count):
    args = profile.workload_args(col, workload)
    args[args.index("--concurrency" if "--concurrency" in args else "--connections") + 1] = \
        str(CONCURRENCY)
    return args + ["--max", str(count), "--duration", "600"]


def callgrind_control(pid, *args):
    r = subprocess.run(["callgrind_control"] + list(args) + [str(pid)], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("callgrind_control %s: %s" % (" ".join(args), r.stdout + r.stderr))


def thread_counts(prefix):
    """{callgrind thread number: instructions} of the last dump written to prefix.*"""
    counts = {}
    for path in glob.glob(prefix + ".*-*"):
        m = re.search(r"\.(\d+)-(\d+)$", path)
        if not m or int(m.group(1)) != 1:
            continue  # dump 1 is the measured window; 0 (none) is the part before it
        with open(path) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    counts[int(m.group(2))] = int(line.split()[1])
                    break
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--system", default="vibepit", choices=["vibepit", "haproxy"],
                    help="haproxy: the relay floor of bench/compare.py, for scale")
    ap.add_argument("--workload", default="setup", choices=["setup", "interactive", "http"])
    ap.add_argument("--count", type=int, default=2000, help="units counted")
    ap.add_argument("--warmup", type=int, default=500, help="units run before counting")
    ap.add_argument("--keep", help="also copy the dumps (one per thread) into this folder, for "
                    "callgrind_annotate")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-instructions.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("instructions: needs root (network namespaces)")
    need("valgrind")
    need("callgrind_control")
    netns.install_signal_cleanup()
    res = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "system": args.system, "bin_dir": os.path.abspath(args.bin_dir),
           "workload": args.workload,
           "count": args.count}
    with compare.BenchTopology(args.bin_dir, pin=True) as topo:
        prefix = os.path.join(topo.tmp, "callgrind.out")
        wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                   "--callgrind-out-file=" + prefix]
        if args.system == "vibepit":
            p, addr = compare.start_vibepit(topo, 1, wrapper=wrapper, timeout=120)
            col = compare.via_proxy(addr, p.pid)
        else:
            p, col = compare.start_haproxy(topo, wrapper=wrapper, timeout=120)
        compare.bench(topo, load_args(col, args.workload, args.warmup), 900)
        callgrind_control(p.pid, "--instr=on")
        done = compare.bench(topo, load_args(col, args.workload, args.count), 900)
        callgrind_control(p.pid, "--dump=measured")
        callgrind_control(p.pid, "--instr=off")
        key = profile.UNITS[args.workload][0]
        units = done["results"][key]
        if units != args.count:
            raise RuntimeError("the load ran %s %s, not %d" % (units, key, args.count))
        counts = thread_counts(prefix)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for path in glob.glob(prefix + ".1-*"):
                shutil.copy(path, os.path.join(args.keep, os.path.basename(path)))
        topo.stop_process(p, timeout=30)
    if not counts:
        sys.exit("instructions: callgrind wrote no dump")
    # The I/O thread is the one that did the most; the others (the log's writer, the
    # control plane, the main thread waiting) are listed beside it.
    per_unit = {str(t): c / units for t, c in sorted(counts.items())}
    io_thread = max(counts, key=counts.get)
    res["per_unit"] = per_unit
    res["io_thread"] = io_thread
    res["io_per_unit"] = counts[io_thread] / units
    res["all_per_unit"] = sum(counts.values()) / units
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    unit = profile.UNIT_NAME[args.workload]
    print("Instructions per %s of %s (callgrind, user space; %s %ss counted after %d; %s):" % (
        unit, args.system, args.count, unit, args.warmup, res["bin_dir"]))
    print("  I/O thread (callgrind thread %d): %.0f" % (io_thread, res["io_per_unit"]))
    for t, v in per_unit.items():
        if int(t) != io_thread:
            print("  thread %s: %.0f (follows time as well as work)" % (t, v))
    print("  all threads: %.0f" % res["all_per_unit"])


if __name__ == "__main__":
    main()
