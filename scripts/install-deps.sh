#!/usr/bin/env bash
# Install everything vibepit needs to build, test and benchmark, from Debian 12 packages.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

packages=(
  # build
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev clang-format
  libasio-dev libc-ares-dev libssl-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libyaml-cpp-dev
  # tests: real clients, network namespaces
  python3 curl iproute2 procps bind9-dnsutils
  # benchmarks: the peers we compare against, and the DNS load generator
  squid tinyproxy dnsmasq-base unbound dnsdist dnsperf
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Debian starts the peers as services on install; the benchmarks run their own copies.
for svc in squid tinyproxy unbound dnsdist; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    $SUDO systemctl stop "$svc" || true
  fi
done
