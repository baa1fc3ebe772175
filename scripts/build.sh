#!/usr/bin/env bash
# Configure and build one preset: release (default), debug, asan, tsan or fuzz. Further
# arguments go to the configure step, e.g. -DVIBEPIT_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (when CMake found it): paths below the clone count relative to it, and the
# directory a debug build ran in does not count, so a fresh clone elsewhere hits the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
preset="${1:-release}"
shift || true
cmake --preset "$preset" "$@" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
