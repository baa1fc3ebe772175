"""Plot CPU-seconds per unit of work for each system, from the JSON of bench/suites/compare.py
(and, when given, bench/suites/dns.py): one panel per workload, one bar per system, the
process tree's time and its core's softirq time stacked.

    /usr/bin/python3 -m bench.suites.plot_cost --proxy build/bench-results.json \
        [--dns build/bench-dns-results.json] --out docs/bench-cpu.png

Runs under Debian's interpreter, where the python3-matplotlib package puts matplotlib.
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PROXY_PANELS = [("throughput", "CONNECT bulk\nCPU-s per GB"),
                ("rate", "CONNECT set-up\nCPU-s per 1 000 tunnels"),
                ("http", "keep-alive HTTP\nCPU-s per 1 000 requests")]
PROXY_NAMES = [("haproxy", "haproxy\n(relay)"), ("haproxy-again", "haproxy\n(A/A)"),
               ("vibepit", "vibepit"), ("squid", "squid"),
               ("tinyproxy", "tinyproxy")]


def panels(doc, specs, names):
    """[(title, [(label, process, softirq)])] for the systems that have the figure."""
    out = []
    for key, title in specs:
        bars = []
        for name, label in names:
            p = doc["peers"].get(name)
            if not p or p.get(key + "_cpu") is None:
                continue
            bars.append((label, p[key + "_cpu"], p.get(key + "_softirq") or 0.0))
        if bars:
            out.append((title, bars))
    return out


def dns_panels(doc):
    out = []
    for stream, title in (("denied", "DNS denied"), ("cached", "DNS cache hit"), ("miss", "DNS cache miss")):
        bars = []
        for name, p in doc["peers"].items():
            s = (p or {}).get(stream) or {}
            if s.get("cpu_per_1k") is None:
                continue
            label = {"dnsdist-again": "dnsdist\n(A/A)"}.get(name, name)  # the pair's second
            bars.append((label, s["cpu_per_1k"], s.get("softirq_per_1k") or 0.0))
        if bars:
            out.append((title + "\nCPU-s per 1 000 queries", bars))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", help="JSON written by bench/suites/compare.py")
    ap.add_argument("--dns", help="JSON written by bench/suites/dns.py")
    ap.add_argument("--out", required=True, help="PNG to write")
    args = ap.parse_args()
    all_panels, when = [], []
    if args.proxy:
        with open(args.proxy) as f:
            doc = json.load(f)
        all_panels += panels(doc, PROXY_PANELS, PROXY_NAMES)
        when.append("proxy " + doc["when"])
    if args.dns:
        with open(args.dns) as f:
            doc = json.load(f)
        all_panels += dns_panels(doc)
        when.append("DNS " + doc["when"])
    if not all_panels:
        raise SystemExit("plot_cost: no CPU figures in the input")
    ncols = min(3, len(all_panels))
    nrows = (len(all_panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.2 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(all_panels):]:
        ax.set_visible(False)
    for ax, (title, bars) in zip(flat, all_panels):
        labels = [b[0] for b in bars]
        proc = [b[1] for b in bars]
        soft = [b[2] for b in bars]
        x = range(len(bars))
        ax.bar(x, proc, color="#4c72b0", label="process")
        ax.bar(x, soft, bottom=proc, color="#dd8452", label="softirq of its core")
        ax.set_xticks(list(x), labels, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    flat[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("CPU per unit of work, each system on one core (lower is better)\n" + ", ".join(when),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_cost: wrote", args.out)


if __name__ == "__main__":
    main()
