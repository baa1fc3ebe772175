"""The proxy comparison's tables and targets, written as the block "compare" of
docs/benchmarks.md."""

import statistics

from bench.lib.matcher import matcher_target
from bench.lib.report import write_block
from bench.lib.stats import MEDIAN_LEVEL, median_interval, pair_verdict, spread, verdict
from bench.lib.workloads import FIXED_TUNNEL_WORKLOADS


COLUMNS = [("none", "no proxy (ceiling)"), ("haproxy", "haproxy (relay floor)"),
           ("haproxy-again", "haproxy again (A/A)"),
           ("vibepit", "vibepit-proxy"), ("squid", "squid"), ("tinyproxy", "tinyproxy")]


def percentiles(fig):
    """(p50, p99) of a fixed-load figure: pooled over the rounds where every tunnel's latency
    was kept, else those of its median run."""
    src = fig.get("pooled") or fig
    return src["p50_us"], src["p99_us"]


def render(results, path):
    peers = results["peers"]
    cols = [(k, label) for k, label in COLUMNS if k in peers]
    header = ["| measurement | %s |" % " | ".join(label for _, label in cols),
              "|---|%s" % ("---|" * len(cols))]

    def table(rows):
        out = list(header)
        for name, get, fmt in rows:
            cells = []
            for k, _ in cols:
                v = get(peers[k]) if peers[k] else None
                cells.append(fmt(v) if v is not None else "-")
            out.append("| %s | %s |" % (name, " | ".join(cells)))
        return out

    field = lambda key: (lambda p: p.get(key))
    n0, n2, n3 = (lambda x: "%.0f" % x), (lambda x: "%.2f" % x), (lambda x: "%.3f" % x)
    rates = table([
        ("CONNECT bulk throughput (Gbit/s)", field("throughput_gbit"), n2),
        ("CONNECT set-up rate (tunnels/s)", field("rate_per_s"), n0),
        ("CONNECT set-up p50 (µs)", field("rate_p50_us"), n0),
        ("CONNECT set-up p99 (µs)", field("rate_p99_us"), n0),
        ("keep-alive HTTP (requests/s)", field("http_rps"), n0),
        ("keep-alive HTTP p99 (µs)", field("http_p99_us"), n0),
    ])
    costs = table([
        ("bulk: CPU-s per GB, process", field("throughput_cpu"), n3),
        ("bulk: CPU-s per GB, softirq of its core", field("throughput_softirq"), n3),
        ("set-up: CPU-s per 1 000 tunnels, process", field("rate_cpu"), n3),
        ("set-up: CPU-s per 1 000 tunnels, softirq", field("rate_softirq"), n3),
        ("keep-alive: CPU-s per 1 000 requests, process", field("http_cpu"), n3),
        ("keep-alive: CPU-s per 1 000 requests, softirq", field("http_softirq"), n3),
    ])
    ft, fr = results.get("fixed_tunnels"), results.get("fixed_requests")
    load_rows = []
    for key, label in (("fixed_rate", "%s tunnels/s offered" % ft), ("fixed_http", "%s requests/s offered" % fr)):
        at = lambda p, key=key: p.get(key)
        load_rows += [
            (label + ": achieved", lambda p, at=at: at(p) and at(p)["achieved_per_s"], n0),
            ("… p50 / p99 (µs)%s" % (", every round's tunnels pooled" if key in FIXED_TUNNEL_WORKLOADS else ""),
             lambda p, at=at: at(p) and "%s / %s" % percentiles(at(p)), str),
            ("… cores busy: process + softirq",
             lambda p, at=at: at(p) and at(p)["cores"] is not None and "%.2f + %.2f" % (
                 at(p)["cores"], at(p)["softirq_cores"] or 0) or None, str),
        ]
        if key == "fixed_rate":
            pipe = lambda p: p.get("fixed_pipelined")
            load_rows.append(("… the byte sent with the CONNECT (one client turn, as through a relay): p50 / p99 (µs)",
                              lambda p: pipe(p) and "%s / %s" % percentiles(pipe(p)), str))
    rest = lambda key, fmt: (lambda p: p.get("at_rest") and fmt % p["at_rest"][key])
    load_rows += [
        ("at rest (no traffic): wake-ups per second", rest("wakeups_per_s", "%.1f"), str),
        ("at rest: CPU-ms per minute", rest("cpu_ms_per_min", "%.0f"), str),
    ]
    loads = table(load_rows)

    def target(label, value, goal, judged):
        return "| %s | %s | %s | %s |" % (label, value, goal, judged)

    targets = []

    rounds = results.get("per_round", {})

    def pairs(key, other, who="vibepit"):
        """(who, other) per round in which both completed `key`."""
        a, b = rounds.get(who, {}).get(key, []), rounds.get(other, {}).get(key, [])
        return [(x, y) for x, y in zip(a, b) if x is not None and y is not None]

    # The A/A pair: a second haproxy with the same configuration, measured like the others.
    # Whatever separates the two is the machine; each target on haproxy is followed by the
    # same comparison between them.
    aa = "haproxy-again"
    aa_goal = "what the machine cannot tell apart"

    def ratio(p):
        """(median of the per-round ratios, the interval for it or None, its text with both
        medians, the spread and the interval)."""
        ratios = [x / y for x, y in p]
        r = statistics.median(ratios)
        return r, median_interval(ratios), "%.2f× (%.3f vs %.3f%s)" % (
            r, statistics.median(x for x, _ in p), statistics.median(y for _, y in p),
            spread(ratios, "%.2f×"))

    def cost_target(label, key, other, factor):
        """vibepit's CPU per unit against `other`'s: the median of the per-round ratios."""
        for who in ("vibepit", aa) if other == "haproxy" else ("vibepit",):
            p = pairs(key, other, who)
            if not p:
                continue
            r, interval, value = ratio(p)
            if who == aa:
                targets.append(target("(A/A) %s, haproxy again vs haproxy" % label, value, aa_goal,
                                      pair_verdict(interval, 1.0)))
            else:
                targets.append(target("%s vs %s" % (label, other), value, "≤ %s×" % factor,
                                      verdict(r, interval, lambda v: v <= factor)))

    def relay_floor(label, key, other, pair=True):
        """For information, beside a target against `other`: the relay floor's own cost
        against `other`'s (no proxy can do less per unit than relay it) and, with `pair`, the
        A/A pair's against haproxy's."""
        for who, against in (("haproxy", other),) + (((aa, "haproxy"),) if pair else ()):
            p = pairs(key, against, who)
            if p:
                _, interval, value = ratio(p)
                targets.append(target("(information) %s, %s vs %s" % (
                    label, "haproxy again" if who == aa else who, against), value,
                    "the relay floor" if who == "haproxy" else aa_goal,
                    pair_verdict(interval, 1.0) if who == aa else "-"))

    def pooled_p99(system, key):
        fig = (results["peers"].get(system) or {}).get(key) or {}
        return (fig.get("pooled") or {}).get("p99_us")

    def p99_row(label, key, other, goal, ok, who="vibepit"):
        """`who`'s p99 at the fixed set-up load minus `other`'s: every round's tunnels
        pooled (the per-round differences beside it, for their spread)."""
        a, b = pooled_p99(who, key), pooled_p99(other, "fixed_rate")
        if a is None or b is None:
            return
        diffs = [x - y for x, y in zip(rounds.get(who, {}).get(key, []),
                                       rounds.get(other, {}).get("fixed_rate", []))
                 if x is not None and y is not None]
        interval = results.get("p99_intervals", {}).get("%s:%s-%s" % (who, key, other))
        within = "; 95%% interval %+d to %+d" % tuple(interval) if interval else ""
        judged = pair_verdict(interval, 0) if who == aa else verdict(a - b, interval, ok)
        targets.append(target(label, "%d vs %d µs pooled, difference %+d µs%s%s" % (
            a, b, a - b, within, spread(diffs, "%+.0f", median=False)), goal, judged))

    def p99_target(other, goal, margin_us):
        p99_row("set-up p99 at %s tunnels/s vs %s" % (ft, other), "fixed_rate", other, goal,
                lambda d: d <= margin_us)
        if other == "haproxy":
            p99_row("(A/A) set-up p99 at %s tunnels/s, haproxy again vs haproxy" % ft, "fixed_rate",
                    other, aa_goal, lambda d: None, who=aa)
    cost_target("bulk CPU-s per GB", "throughput", "haproxy", 1.05)
    cost_target("set-up CPU-s per 1 000 tunnels", "rate", "haproxy", 1.3)
    cost_target("set-up CPU-s per 1 000 tunnels", "rate", "squid", 0.5)
    relay_floor("set-up CPU-s per 1 000 tunnels", "rate", "squid", pair=False)
    p99_target("haproxy", "≤ haproxy's + 100 µs", 100)
    # For information: the same comparison with the client's byte sent along with the
    # CONNECT, so that both clients wait once; what is left is the proxy's own work.
    p99_row("(information) set-up p99 at %s tunnels/s, the byte sent with the CONNECT, vs haproxy" % ft,
            "fixed_pipelined", "haproxy", "the client turn the protocol adds, taken out", lambda d: None)
    p99_target("squid", "below squid's", -1)
    cost_target("keep-alive CPU-s per 1 000 requests", "http", "squid", 0.3)
    relay_floor("keep-alive CPU-s per 1 000 requests", "http", "squid")
    mem = results.get("idle_memory")
    if mem:
        short = ""
        if mem.get("of", mem["tunnels"]) > mem["tunnels"]:   # say why some did not open
            kinds = ", ".join("%s %d" % (k, v) for k, v in mem.get("errors", {}).items() if k != "total" and v)
            short = "; %d asked for, failed: %s" % (mem["of"], kinds or "none counted")
        targets.append(target("memory per idle tunnel (%d tunnels%s)" % (mem["tunnels"], short),
                              "%.1f KiB" % mem["kib_per_tunnel"], "≤ 8 KiB at ≥ 9 950 tunnels",
                              verdict(mem, None, lambda m: m["kib_per_tunnel"] <= 8 and m["tunnels"] >= 9950)))
    if results.get("matcher"):
        targets.append(target("match time, 100 000 vs 10 rules", *matcher_target(results["matcher"])))

    pin = results.get("pinning")
    where = ("each system under test pinned to core %d, the load generator and servers to core %d" % (
        pin["sut"], pin["load"]) if pin else "not pinned")
    write_block(path, "compare", [
        "Run: %s, %s, %d s per measurement, %d rounds of %d run(s) each, the systems interleaved "
        "within each round; vibepit-proxy threads=%s; %s." % (
            results["when"], results["machine"], results["duration_s"], results.get("rounds", 1),
            results["repeat"], results["vibepit_threads"], where),
        "",
        "At saturation:",
        "",
    ] + rates + [
        "",
        "CPU-seconds per unit of work at saturation (the system's process tree; the softirq time "
        "of its core apart):",
        "",
    ] + costs + [
        "",
        "At a fixed offered load, and at rest%s:" % (
            " (a fixed tunnel load in %d slices a round, the systems taking turns slice by slice)"
            % results["fixed_slices"] if results.get("fixed_slices", 1) > 1 else ""),
        "",
    ] + loads + [
        "",
        "Targets (CPU compared as process + softirq; a CPU ratio is the median of the "
        "per-round ones, with a %.0f%%-or-better interval for that median from the rounds' order "
        "statistics (from 5 rounds up); a p99 difference is that of every round's tunnels pooled, with a 95%% "
        "bootstrap interval over the runs; the per-round range beside each. A target is met or "
        "not met when its whole interval lies on one side of the goal, and not resolved when "
        "the goal lies inside it: the run cannot tell):" % (100 * MEDIAN_LEVEL),
        "",
        "| target | measured | goal | |",
        "|---|---|---|---|",
    ] + targets)
