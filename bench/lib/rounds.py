"""The proxy comparison's rounds: every workload through every system, interleaved, and
the figures of each system from its runs (medians, pooled percentiles, per-round figures
and the p99 differences' intervals)."""

import os
import random

from bench.lib.stats import median, median_run, pooled, quantile_interval
from bench.lib.workloads import (FIXED_TUNNEL_WORKLOADS, UNITS, WORKLOADS, cost_fields, metered, read_samples,
                                 run_cost, workload_args)


# The p99 differences a target reads, with an interval from resampling the runs: (system,
# its fixed load, the system it is compared with at fixed_rate).
P99_PAIRS = (("vibepit", "fixed_rate", "haproxy"), ("haproxy-again", "fixed_rate", "haproxy"),
             ("vibepit", "fixed_pipelined", "haproxy"), ("vibepit", "fixed_rate", "squid"))


def p99_intervals(runs):
    """P99_PAIRS' intervals from measure_rounds()'s runs: "who:load-other" -> [low, high]."""
    out = {}
    for who, load, other in P99_PAIRS:
        a = [r["latencies_us"] for batch in runs.get(who, {}).get(load, []) for r in batch]
        b = [r["latencies_us"] for batch in runs.get(other, {}).get("fixed_rate", []) for r in batch]
        interval = quantile_interval([x for x in a if x], [x for x in b if x])
        if interval:
            out["%s:%s-%s" % (who, load, other)] = interval
    return out


def error_kinds(runs):
    """The load generator's failures over `runs`, by kind."""
    out = {}
    for r in runs:
        for kind, n in r["errors"].items():
            if kind != "total" and n:
                out[kind] = out.get(kind, 0) + n
    return out


def summarize(topo, workload, runs):
    """The figures of one workload through one system from all its runs: the median, with
    every run's rate kept beside it, and the CPU-seconds per unit."""
    res = {}
    if workload == "throughput":
        t = median_run(runs, lambda r: r["results"]["gbit_per_s"])
        res["throughput_gbit"] = t["results"]["gbit_per_s"]
        res["throughput_runs"] = [r["results"]["gbit_per_s"] for r in runs]
    elif workload == "rate":
        r = median_run(runs, lambda x: x["results"]["tunnels_per_s"])
        res["rate_per_s"] = r["results"]["tunnels_per_s"]
        res["rate_runs"] = [x["results"]["tunnels_per_s"] for x in runs]
        res["rate_p50_us"] = r["results"]["latency_us"].get("p50_us")
        res["rate_p99_us"] = r["results"]["latency_us"].get("p99_us")
        res["rate_errors"] = sum(x["errors"]["total"] for x in runs)
        res["rate_error_kinds"] = error_kinds(runs)
    elif workload == "http":
        h = median_run(runs, lambda x: x["results"]["requests_per_s"])
        res["http_rps"] = h["results"]["requests_per_s"]
        res["http_runs"] = [x["results"]["requests_per_s"] for x in runs]
        res["http_p99_us"] = h["results"]["latency_us"].get("p99_us")
        res["http_errors"] = sum(x["errors"]["total"] for x in runs)
        res["http_error_kinds"] = error_kinds(runs)
    else:
        count = "tunnels" if workload in FIXED_TUNNEL_WORKLOADS else "requests"
        m = median_run(runs, lambda x: x["results"]["latency_us"].get("p99_us") or 0)
        sut = topo.cpus["sut"] if topo.cpus else None
        res[workload] = {
            "offered_per_s": m["offered_per_s"],
            "achieved_per_s": m["results"][count] / m["results"]["elapsed_s"],
            "p50_us": m["results"]["latency_us"].get("p50_us"),
            "p99_us": m["results"]["latency_us"].get("p99_us"),
            "p99_runs": [x["results"]["latency_us"].get("p99_us") for x in runs],
            "cores": median(x["cpu"]["process_s"] / x["cpu"]["wall_s"]
                            if x["cpu"]["process_s"] is not None else None for x in runs),
            "softirq_cores": median(x["cpu"]["softirq_s"].get(sut, 0.0) / x["cpu"]["wall_s"]
                                    for x in runs) if sut is not None else None,
            "errors": sum(x["errors"]["total"] for x in runs),
            "error_kinds": error_kinds(runs),
        }
    if workload in UNITS:
        cost_fields(topo, res, workload, runs, UNITS[workload])
    return res


def measure_rounds(topo, systems, rounds, repeat, duration, fixed_tunnels, fixed_requests, slices=1,
                   seed=14):
    """Every workload through every system, interleaved: each round runs each workload through
    each system (`repeat` runs), in an order that rotates by one system per round, so that
    the systems a target compares are measured seconds apart rather than minutes, and none is
    always first. On a shared machine the rate of everything drifts by 10-25% over minutes;
    this keeps the drift out of the ratios.

    A fixed tunnel load's run is cut into `slices` runs of duration / slices seconds, the
    systems taking turns slice by slice. Its figure is a p99, and a slow spell of the machine
    lasting seconds lands on one system's 5 s run but is shared by several systems' 1 s
    slices. Shorter stalls, within a slice, still fall on one system: quantile_interval() says
    how far they move a difference. The tunnels counted are the same.

    Each slice runs the systems in a new order, drawn at random (from `seed`, so a run can be
    repeated), so that every system follows every other about equally often. What ran just
    before moves a slice's tail: after the no-proxy column the proxy core has been idle for a
    second, and squid leaves work behind. A fixed rotation, even one reversed every other
    slice, keeps each system's neighbours: vibepit-proxy always came after the no-proxy column
    or haproxy, never after squid, and the second haproxy after squid half the time.

    `systems` maps a name to its Column. Returns (name -> figures, name -> workload -> the
    runs of each round). A system whose run fails is reported as None and left out of the
    rounds that follow."""
    names = list(systems)
    args = {n: workload_args(systems[n], duration, fixed_tunnels, fixed_requests) for n in names}
    sliced = {n: workload_args(systems[n], duration / slices, fixed_tunnels, fixed_requests)
              for n in names}
    runs = {n: {w: [] for w in args[n]} for n in names}
    samples = os.path.join(topo.tmp, "samples.txt")
    rng = random.Random(seed)
    failed = {}
    for rnd in range(rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for w in WORKLOADS:
            fixed_tunnels_run = w in FIXED_TUNNEL_WORKLOADS
            extra = ["--samples", samples] if fixed_tunnels_run else []
            batches = {n: [] for n in order}
            for _ in range(slices if fixed_tunnels_run else 1):
                for n in (rng.sample(order, len(order)) if fixed_tunnels_run else order):
                    if n in failed or w not in args[n]:
                        continue
                    argv = (sliced if fixed_tunnels_run else args)[n][w] + extra
                    try:
                        for _ in range(repeat):
                            run = metered(topo, systems[n], argv, duration + 60)
                            if fixed_tunnels_run:
                                run["latencies_us"] = [t for _, t, _ in read_samples(samples)]
                            batches[n].append(run)
                    except RuntimeError as e:
                        print("compare: %s failed: %s" % (n, e), flush=True)
                        failed[n] = str(e)
            for n in order:
                if n in failed or not batches[n]:
                    continue
                for run in batches[n]:
                    run["offered_per_s"] = {"fixed_rate": fixed_tunnels, "fixed_pipelined": fixed_tunnels,
                                            "fixed_http": fixed_requests}.get(w)
                    if run["errors"].get("total"):   # every kind is kept in the JSON too
                        print("compare: round %d, %s, %s: errors %s" % (rnd + 1, n, w, {
                            k: v for k, v in run["errors"].items() if v}), flush=True)
                runs[n][w].append(batches[n])
        print("compare: round %d of %d done" % (rnd + 1, rounds), flush=True)
    figures = {}
    for n in names:
        if n in failed:
            figures[n] = None
            continue
        figures[n] = {}
        for w, per_round in runs[n].items():
            figures[n].update(summarize(topo, w, [r for batch in per_round for r in batch]))
            if w in FIXED_TUNNEL_WORKLOADS:
                figures[n][w]["pooled"] = pooled([t for batch in per_round for r in batch
                                                  for t in r["latencies_us"]])
    return figures, runs


def per_round(topo, runs):
    """name -> workload -> one figure per round, the median of that round's runs: CPU-seconds
    per unit (process and softirq) for a saturating workload, p99 µs for a fixed load (of
    the round's tunnels pooled over its slices, for a fixed tunnel load). The targets compare
    two systems round by round with these."""
    out = {}
    for name, workloads in runs.items():
        out[name] = {}
        for w, rounds in workloads.items():
            if w in FIXED_TUNNEL_WORKLOADS:  # the round's slices' tunnels pooled
                out[name][w] = [(pooled([t for r in batch for t in r["latencies_us"]]) or {}).get("p99_us")
                                for batch in rounds]
                continue
            if w in UNITS:
                value = lambda r, w=w: run_cost(topo, w, r)
            else:
                value = lambda r: r["results"]["latency_us"].get("p99_us")
            out[name][w] = [median(value(r) for r in batch) for batch in rounds]
    return out
