"""The matcher microbenchmark (vibepit-microbench BM_HttpMatch) at 10 and 100 000 rules,
in rounds, and its target row."""

import json
import os
import statistics
import subprocess

from bench.lib.stats import median_interval, spread, verdict
from bench.lib.topology import on_sut_core


# Rounds of the matcher microbenchmark, and the time each of its four benchmarks runs in one.
MATCHER_ROUNDS = 15
MATCHER_MIN_TIME_S = 0.2
MATCHER_FILTER = "BM_HttpMatch/(hit|miss)/(10|100000)$"


def matcher_round(exe):
    """One round: the four benchmarks (hit and miss, at 10 and at 100 000 rules) run once each
    in a random order, in one process. Returns {kind: {"ns_10", "ns_100000", "ratio"}}."""
    r = subprocess.run(on_sut_core([exe, "--benchmark_filter=" + MATCHER_FILTER,
                                    "--benchmark_format=json",
                                    "--benchmark_min_time=%g" % MATCHER_MIN_TIME_S,
                                    "--benchmark_enable_random_interleaving=true"]),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("vibepit-microbench exited %d: %s" % (r.returncode, r.stderr.strip()[-500:]))
    ns = {b["name"]: b["cpu_time"] for b in json.loads(r.stdout)["benchmarks"]
          if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred")}
    out = {}
    for kind in ("hit", "miss"):
        small, large = ns["BM_HttpMatch/%s/10" % kind], ns["BM_HttpMatch/%s/100000" % kind]
        out[kind] = {"ns_10": small, "ns_100000": large, "ratio": large / small}
    return out


def matcher_ratio(bin_dir, rounds=MATCHER_ROUNDS):
    """How much longer a match takes with 100 000 rules than with 10. This host's speed moves
    by half from one second to the next, so a ratio of two sizes measured seconds apart is
    mostly that drift. Each round measures both sizes within a second or two, in a random
    order (matcher_round); a round's figure is the larger of its hit and miss ratios, and the
    target is judged on the median of the rounds' figures with its interval (median_interval)."""
    exe = os.path.join(bin_dir, "vibepit-microbench")
    per_round = [matcher_round(exe) for _ in range(rounds)]
    worst = [max(r["hit"]["ratio"], r["miss"]["ratio"]) for r in per_round]
    out = {"rounds": per_round, "worst": statistics.median(worst),
           "worst_per_round": worst, "interval": median_interval(worst)}
    for kind in ("hit", "miss"):
        out[kind] = {key: statistics.median(r[kind][key] for r in per_round)
                     for key in ("ns_10", "ns_100000", "ratio")}
    return out


def matcher_target(m):
    """The matcher row's measured text, goal and verdict from matcher_ratio's figures. Runs
    before 2026-12-02 measured each size once, seconds apart: one figure, judged alone."""
    worst = m.get("worst", max(m["hit"]["ratio"], m["miss"]["ratio"]))
    detail = "hit %.1f→%.1f ns, miss %.1f→%.1f ns" % (
        m["hit"]["ns_10"], m["hit"]["ns_100000"], m["miss"]["ns_10"], m["miss"]["ns_100000"])
    if "worst_per_round" in m:
        detail = "the larger of hit and miss, median of %d rounds; %s%s" % (
            len(m["worst_per_round"]), detail, spread(m["worst_per_round"], "%.2f×"))
    if m.get("when"):  # measured apart from the run (re-measured into its JSON)
        detail += "; measured %s" % m["when"]
    return "%.2f× (%s)" % (worst, detail), "≤ 2×", verdict(worst, m.get("interval"), lambda w: w <= 2)
