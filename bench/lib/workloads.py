"""The data-path workloads: one `vibepit-bench` run in "sb", its arguments for each
workload, and the CPU it cost the system under test per unit of work."""

import json

from bench.lib import cpu
from bench.lib.stats import median


def bench(topo, args, timeout):
    r = topo.run(topo.sb, [topo.bin("vibepit-bench")] + args,
                 timeout=timeout)
    out = r.stdout.decode(errors="replace")
    try:
        return json.loads(out)
    except ValueError:
        raise RuntimeError("vibepit-bench %s failed (%d): %s %s" % (
            " ".join(args), r.returncode, out[-2000:], r.stderr.decode(errors="replace")[-2000:]))


def metered(topo, col, args, timeout):
    """One vibepit-bench run through `col`, with the CPU it cost the system under test."""
    meter = cpu.Meter(col.pid).start()
    out = bench(topo, args, timeout)
    out["cpu"] = meter.stop()
    return out


def unit_cost(topo, run, units):
    """CPU-seconds per unit of work: the system's processes, and the softirq time of its
    core (kernel packet work no process is charged for), apart."""
    if not units:
        return None, None
    c = run["cpu"]
    sut = topo.cpus["sut"] if topo.cpus else None
    process = c["process_s"] / units if c["process_s"] is not None else None
    softirq = c["softirq_s"].get(sut, 0.0) / units if sut is not None else None
    return process, softirq


def cost_fields(topo, res, key, runs, units_of):
    costs = [unit_cost(topo, r, units_of(r)) for r in runs]
    res[key + "_cpu"] = median(c[0] for c in costs)
    res[key + "_softirq"] = median(c[1] for c in costs)


# The data-path workloads, in the order each round runs them. Each is one vibepit-bench run.
WORKLOADS = ("throughput", "rate", "http", "fixed_rate", "fixed_pipelined", "fixed_http")
FIXED_TUNNEL_WORKLOADS = ("fixed_rate", "fixed_pipelined")


def workload_args(col, duration, fixed_tunnels, fixed_requests):
    """workload -> vibepit-bench arguments for one run through `col` (fixed loads at 0 are left out)."""
    rate_args = ["connect-rate", "--proxy", col.proxy, "--target", col.target("echo"),
                 "--concurrency", "32", "--duration", str(duration), "--max", "2000000", "--linger0"]
    http_args = ["http-rps", "--proxy", col.proxy, "--url", "http://%s/" % col.target("http"),
                 "--connections", "32", "--duration", str(duration), "--max", "5000000"]
    out = {"throughput": ["connect-throughput", "--proxy", col.proxy, "--target", col.target("source"),
                          "--streams", "4", "--duration", str(duration), "--direction", "down"],
           "rate": rate_args, "http": http_args}
    # At a fixed offered load below every system's saturation: what an operator running many
    # sessions on one host pays (cores busy) and what a client waits (p50/p99).
    if fixed_tunnels:
        out["fixed_rate"] = rate_args + ["--rate", str(fixed_tunnels)]
        # The same load with the client's byte sent along with the CONNECT: the client then
        # waits once, as a relay's client does, and the latency is the proxy's own work
        # without the extra turn the protocol asks for. (Direct, the byte always goes at once.)
        if col.proxy != "none":
            out["fixed_pipelined"] = out["fixed_rate"] + ["--pipeline"]
    if fixed_requests:
        out["fixed_http"] = http_args + ["--rate", str(fixed_requests)]
    return out


# Work units of each saturating workload's cost: per GB, per 1 000 tunnels, per 1 000 requests.
UNITS = {"throughput": lambda r: r["results"]["bytes"] / 1e9,
         "rate": lambda r: r["results"]["tunnels"] / 1e3,
         "http": lambda r: r["results"]["requests"] / 1e3}


def run_cost(topo, workload, run):
    """One run's CPU-seconds per unit, process and softirq together (the targets' measure)."""
    process, softirq = unit_cost(topo, run, UNITS[workload](run))
    return None if process is None else process + (softirq or 0.0)


def read_samples(path):
    """`vibepit-bench connect-rate --samples` lines: (start, total, to the 200), in µs."""
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f if not line.startswith("#")]
