#!/usr/bin/env python3
"""Time from `vibepit run -- true` to its exit, with the images present, on a real Docker
engine (the e2e fake internet as the egress network, so nothing leaves the machine).
Prints the median, the spread, the launcher's own CPU time, and the proxy image's size.

    python3 bench/session_startup.py --bin-dir build/bin [--runs 10]
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import e2e_harness as h  # noqa: E402


def main():
    runs = 10
    if "--runs" in sys.argv:
        i = sys.argv.index("--runs")
        runs = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    h.BIN = h.reachable_copy(h.bin_dir())
    if os.geteuid() != 0 or not h.docker_ready():
        sys.exit("needs root and a running Docker engine")
    inet = h.FakeInternet().start()
    ws = h.Workspace()
    try:
        args = ["run", "-q", "-T", "--upstream-dns", h.DNS_ADDR, "--", "true"]
        warm = ws.vibepit(inet, args)   # builds the user's image on a first run
        if warm.returncode != 0:
            sys.exit("vibepit run failed: " + warm.stderr)
        times, cpu = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            r = ws.vibepit(inet, args)
            times.append(time.monotonic() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if r.returncode != 0:
                sys.exit("vibepit run failed: " + r.stderr)
        images = json.loads(subprocess.run([os.path.join(h.BIN, "vibepit"), "image", "ls", "--json"],
                                           capture_output=True, text=True).stdout)
        proxy = [i for i in images if i["kind"] == "proxy"]
        print("vibepit run -- true, %d runs: median %.2f s (min %.2f, max %.2f); "
              "vibepit's own CPU %.3f s per run" % (runs, statistics.median(times), min(times),
                                                    max(times), statistics.median(cpu)))
        for i in proxy:
            print("proxy image %s: %.1f MB" % (",".join(i["tags"]), i["size"] / 1e6))
    finally:
        ws.close()
        inet.close()


if __name__ == "__main__":
    main()
