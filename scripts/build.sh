#!/usr/bin/env bash
# Configure and build one preset: release (default), debug, asan, tsan or fuzz. Further
# arguments go to the configure step, e.g. -DVIBEPIT_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
cmake --preset "$preset" "$@" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
