"""Writes the fuzzing campaign's figures (tests/fuzz/campaign.ndjson, from
scripts/fuzz-campaign.sh) into the generated block of docs/security.md: for each target
in tests/fuzz/corpus, its latest run of at least --minutes minutes, or "not run yet".
   python3 -m scripts.fuzz_report [--ndjson FILE] [--doc FILE] [--minutes 30]"""

import argparse
import json
import os

from bench.lib.report import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def group(n):
    return "{:,}".format(n).replace(",", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ndjson", default=os.path.join(ROOT, "tests", "fuzz", "campaign.ndjson"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "security.md"))
    ap.add_argument("--minutes", type=int, default=30)
    a = ap.parse_args()
    latest = {}
    with open(a.ndjson) as f:
        for line in f:
            r = json.loads(line)
            if r["minutes"] >= a.minutes:
                latest[r["target"]] = r
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus")
    lines = ["| target | run (UTC) | minutes | executions | edges covered | features "
             "| corpus: before → after | crashes |",
             "|---|---|---|---|---|---|---|---|"]
    for t in sorted(os.listdir(corpus)):
        r = latest.get(t)
        if not r:
            lines.append("| `%s` | not run yet | | | | | %d files | |" % (t, len(os.listdir(os.path.join(corpus, t)))))
            continue
        lines.append("| `%s` | %s | %d | %s | %d | %d | %d → %d | %d |" % (
            t, r["when"].replace("T", " ").rstrip("Z")[:16], r["minutes"], group(r["execs"]), r["cov"], r["ft"],
            r["corpus_before"], r["corpus_after"], r["crashes"]))
    write_block(a.doc, "fuzz", lines, writer="python3 -m scripts.fuzz_report")
    print("fuzz-report: %d of %d targets have a run of %d minutes or more" % (
        len(latest), len(os.listdir(corpus)), a.minutes))


if __name__ == "__main__":
    main()
