#!/usr/bin/env bash
# Build, then measure vibepit-proxy against its peers in network namespaces and write the
# tables to docs/benchmarks.md: the HTTP/CONNECT proxy against no proxy, haproxy (the plain
# TCP relay: the floor), squid and tinyproxy (bench/suites/compare.py), the DNS server
# against dnsmasq, unbound and dnsdist (bench/suites/dns.py), and the control API's figures
# (bench/suites/control.py). Each system under test runs pinned to one core and the load to
# the other; beside each rate the tables give the CPU-seconds each unit of work cost it.
# Then docs/bench-cpu.png plots those costs (bench/suites/plot_cost.py). Needs root and two cores.
#   bench/compare.sh              all three
#   bench/compare.sh proxy [ARGS] only the proxy comparison (ARGS: python3 -m bench.suites.compare --help)
#   bench/compare.sh dns [ARGS]   only the DNS comparison (ARGS: python3 -m bench.suites.dns --help)
#   bench/compare.sh control [ARGS] only the control API (ARGS: python3 -m bench.suites.control --help)
# The JSON of each run is kept in build/bench-results.json and build/bench-dns-results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench
scripts/build.sh release -DVIBEPIT_TESTS=ON -DVIBEPIT_BENCH=ON
proxy_json=build/bench-results.json
dns_json=build/bench-dns-results.json
plot() {  # the plot from whichever of the two runs exist; Debian's python3 has matplotlib
  local args=() json
  [ -f "$proxy_json" ] && args+=(--proxy "$proxy_json")
  [ -f "$dns_json" ] && args+=(--dns "$dns_json")
  for json in "$proxy_json" "$dns_json"; do
    [ -f "$json" ] || echo "compare.sh: no $json in this checkout: docs/bench-cpu.png is" \
      "drawn without its panels (run the other half of bench/compare.sh too)" >&2
  done
  /usr/bin/python3 -m bench.suites.plot_cost "${args[@]}" --out docs/bench-cpu.png
}
case "${1:-all}" in
  proxy) shift; python3 -m bench.suites.compare "$@"; plot ;;
  dns) shift; python3 -m bench.suites.dns "$@"; plot ;;
  control) shift; exec python3 -m bench.suites.control "$@" ;;
  all) python3 -m bench.suites.compare && python3 -m bench.suites.dns && plot &&
         python3 -m bench.suites.control ;;
  *) echo "usage: bench/compare.sh [all | proxy ARGS | dns ARGS | control ARGS]" >&2; exit 2 ;;
esac
