"""Statistics of the benchmarks: medians, pooled percentiles, intervals (order statistics
for a median of per-round figures, a bootstrap for a pooled quantile) and the verdict of a
target from a point and its interval."""

import math
import random


def median_run(runs, key):
    """The run whose `key` is the median: its latency figures stay consistent with it."""
    ordered = sorted(runs, key=key)
    return ordered[len(ordered) // 2]


def median(values):
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def pooled(latencies):
    """Percentiles of latencies (µs) pooled over every round's run. One 5 s round's p99
    rests on its hundred slowest tunnels, and two identical relays' per-round p99s differ by
    up to 500 µs here (bench/suites/tail.py's A/A pair); pooled over the rounds they differ by
    about 100."""
    lat = sorted(latencies)
    if not lat:
        return None
    q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))]  # noqa: E731
    return {"count": len(lat), "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99),
            "p999_us": q(0.999)}


def quantile_interval(a_runs, b_runs, q=0.99, draws=1000, level=0.95, seed=14):
    """A bootstrap interval for pooled quantile `q` (the p99 by default) of a minus b, in µs.
    Each side's runs (every tunnel's latency of one run each) are drawn with
    replacement, as many as there are, and pooled as pooled() pools them. A run is the unit
    because the machine's stalls, which set the tail here, come and go within a run: the
    interval says how far the difference moves with which stalls each system happened to
    meet. None with fewer than two runs a side."""
    if len(a_runs) < 2 or len(b_runs) < 2:
        return None
    rng = random.Random(seed)
    tops = [[sorted(r, reverse=True) for r in side] for side in (a_runs, b_runs)]

    def quantile(side):
        drawn = [rng.choice(side) for _ in side]
        n = sum(len(r) for r in drawn)
        rank = n - min(n - 1, int(n * q))  # pooled()'s quantile, counted from the top
        top = [x for r in drawn for x in r[:rank]]  # the pool's `rank` largest are among these
        top.sort(reverse=True)
        return top[rank - 1]

    diffs = sorted(quantile(tops[0]) - quantile(tops[1]) for _ in range(draws))
    cut = int(draws * (1 - level) / 2)
    return [diffs[cut], diffs[draws - 1 - cut]]


def spread(values, fmt, median=True):
    """"; rounds LOW–HIGH" for a target's per-round figures (nothing for a single round), and
    with `median` the interval for their median where there are enough rounds for one
    (median_interval)."""
    if len(values) < 2:
        return ""
    text = "; rounds %s–%s" % (fmt % min(values), fmt % max(values))
    mi = median and median_interval(values)
    if mi:
        text += "; %.0f%% interval for the median %s–%s" % (100 * mi[2], fmt % mi[0], fmt % mi[1])
    return text


# The confidence a target's verdict asks of an interval for a median of per-round figures.
MEDIAN_LEVEL = 0.9


def median_interval(values, level=MEDIAN_LEVEL):
    """An interval for the median of per-round figures that assumes nothing about their
    distribution: from the k-th smallest to the k-th largest, which holds the true median
    unless k or more rounds fell on one side of it, a chance of 2·P(Binomial(n, ½) < k). k is
    the largest that keeps the coverage at `level` or above. Returns (low, high, coverage), or
    None when even the smallest to the largest cover less (fewer than 5 rounds at 0.9)."""
    n, ordered, best = len(values), sorted(values), None
    for k in range(1, n // 2 + 1):
        coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if coverage >= level:
            best = (ordered[k - 1], ordered[n - k], coverage)
    return best


def verdict(point, interval, ok):
    """A target's verdict from its point figure and the interval around it (None: by the point
    alone). Met or not met when the whole interval lies on one side of the goal; where the goal
    lies inside it, the run cannot tell, and the verdict says so and which side the point is on.
    `ok` says whether a figure meets the goal (monotone, so the interval's ends decide)."""
    if point is None or ok(point) is None:
        return "-"
    if interval is not None:
        low, high = ok(interval[0]), ok(interval[1])
        if low != high:
            return "not resolved (the estimate %s it)" % ("meets" if ok(point) else "misses")
    return "met" if ok(point) else "**not met**"


def pair_verdict(interval, same):
    """The A/A row's column: "-" while the pair's interval holds `same` (1× for a ratio, 0 for
    a difference), as it should for two identical systems; otherwise a warning that this run's
    intervals claim more than the machine can tell."""
    if interval is None or interval[0] <= same <= interval[1]:
        return "-"
    return "**the pair differs**: intervals in this run are too narrow"
