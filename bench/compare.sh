#!/usr/bin/env bash
# Build, then measure vibepit-proxy against its peers in network namespaces and write the
# tables to docs/benchmarks.md: the HTTP/CONNECT proxy against no proxy, squid and
# tinyproxy (bench/compare.py), and the DNS server against dnsmasq, unbound and dnsdist
# (bench/compare_dns.py), and the control API's figures (bench/compare_control.py). Needs root.
#   bench/compare.sh              both
#   bench/compare.sh proxy [ARGS] only the proxy comparison (ARGS: compare.py --help)
#   bench/compare.sh dns [ARGS]   only the DNS comparison (ARGS: compare_dns.py --help)
#   bench/compare.sh control [ARGS] only the control API (ARGS: compare_control.py --help)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench
scripts/build.sh release -DVIBEPIT_TESTS=ON -DVIBEPIT_BENCH=ON
case "${1:-all}" in
  proxy) shift; exec python3 bench/compare.py "$@" ;;
  dns) shift; exec python3 bench/compare_dns.py "$@" ;;
  control) shift; exec python3 bench/compare_control.py "$@" ;;
  all) python3 bench/compare.py && python3 bench/compare_dns.py && python3 bench/compare_control.py ;;
  *) echo "usage: bench/compare.sh [all | proxy ARGS | dns ARGS | control ARGS]" >&2; exit 2 ;;
esac
