#!/usr/bin/env bash
# Soak: bench/suites/soak.py (its --help says what runs and what is checked) against a release
# build, in network namespaces. Needs root.
#   bench/soak.sh            30 minutes; the figures go to docs/benchmarks.md
#   bench/soak.sh ARGS       the soak's own arguments, e.g. --duration 60 (the short version
#                            that the test suite runs as ctest soak.short)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/build.sh release -DVIBEPIT_TESTS=ON -DVIBEPIT_BENCH=ON
if [ $# -eq 0 ]; then
  exec python3 -m bench.suites.soak --duration 1800 --markdown docs/benchmarks.md
fi
exec python3 -m bench.suites.soak "$@"
