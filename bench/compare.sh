#!/usr/bin/env bash
# Build, then measure vibepit-proxy against no proxy, squid and tinyproxy in network
# namespaces, and write the table to docs/benchmarks.md. Needs root. Options: see
# `python3 bench/compare.py --help` (e.g. --duration 10).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
exec python3 bench/compare.py "$@"
