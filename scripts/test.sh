#!/usr/bin/env bash
# Set-up command (2): install, build, and run the whole test suite, in four stages (which
# test runs in which, and why: docs/testing.md):
#   release  unit, integration, e2e (a real Docker engine, then rootful and rootless
#            Podman) and the short soak
#   asan     ASan+UBSan build: unit and integration tests
#   tsan     TSan build: unit and integration tests
#   fuzz     every libFuzzer target for a short run over its corpus
# First, in seconds: clang-format and flake8 over the sources; after the release build,
# clang-tidy over the libraries and programs.
# Integration tests need root (network namespaces); the e2e tests need a Docker engine and
# Podman's API: when none answers, this script starts dockerd and `podman system service`
# (as root, and as the tests' user for rootless Podman), and stops them at the end.
# Whatever the tests made on any engine (label dev.vibepit.test) is removed.
#   scripts/test.sh           every stage
#   scripts/test.sh --quick   the release stage only (what scripts/fresh-check.sh --quick runs)
# VIBEPIT_TEST_TIMES=FILE gets one line per step, "NAME SECONDS" (.ci/run's time table);
# VIBEPIT_TEST_SUMMARY=FILE the summary and what failed tests said.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=""
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *)
    echo "usage: scripts/test.sh [--quick]" >&2
    exit 2
    ;;
esac
# One line per step in VIBEPIT_TEST_TIMES: NAME SECONDS, and for a build the compiler
# cache's hits and misses during it (a build from an empty cache takes far longer).
step_t0=$SECONDS
step_done() {  # name [extra]: the step that began at step_t0 ends now
  [ -z "${VIBEPIT_TEST_TIMES:-}" ] || echo "$1 $((SECONDS - step_t0))${2:+ $2}" >>"$VIBEPIT_TEST_TIMES"
  step_t0=$SECONDS
}
ccache_counts() {  # "HITS MISSES" so far, or nothing without ccache
  command -v ccache >/dev/null || return 0
  ccache --print-stats 2>/dev/null | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ {h += $2}
    $1 == "cache_miss" {m += $2} END {print h + 0, m + 0}'
}

scripts/install-deps.sh --test || exit 1

if [ "$(id -u)" -ne 0 ]; then
  echo "test: integration tests create network namespaces; run as root (sudo $0)" >&2
  exit 1
fi

# --- the Docker engine for the e2e tests ---------------------------------------------
# shellcheck source=scripts/docker-engine.sh
. scripts/docker-engine.sh

# Remove what the tests made (dev.vibepit.test) on the engine DOCKER_HOST names (Docker's
# when unset).
remove_test_objects() {
  if docker info >/dev/null 2>&1; then
    local ids
    ids=$(docker ps -aq --filter label=dev.vibepit.test)
    [ -z "$ids" ] || docker rm -f $ids >/dev/null
    ids=$(docker network ls -q --filter label=dev.vibepit.test)
    [ -z "$ids" ] || docker network rm $ids >/dev/null
    ids=$(docker volume ls -q --filter label=dev.vibepit.test)
    [ -z "$ids" ] || docker volume rm -f $ids >/dev/null
    # Images built FROM other test images inherit their label; a parent goes only after its
    # children, so remove in passes until none is left.
    local pass
    for pass in 1 2 3 4; do
      ids=$(docker images -q --filter label=dev.vibepit.test | sort -u)
      [ -n "$ids" ] || break
      docker rmi -f $ids >/dev/null 2>&1 || true
    done
    ids=$(docker images -q --filter label=dev.vibepit.test | sort -u)
    [ -z "$ids" ] || echo "test: could not remove test images: $ids" >&2
  fi
}

# At the end: what the tests made, then the engines this script started.
cleanup_engines() {
  remove_test_objects
  DOCKER_HOST="unix://$podman_socket" remove_test_objects
  DOCKER_HOST="unix://$rootless_socket" remove_test_objects
  stop_podman_rootless
  stop_podman
  stop_docker
}

if [ -n "${VIBEPIT_TEST_NO_E2E:-}" ]; then
  # scripts/fresh-check.sh sets it: in its chroot a dockerd starts and vibepit run makes a
  # session (its first step shows that), but exec into a container fails there
  # ("chdir to cwd ... no such file or directory"), which the e2e tests rely on.
  summary_e2e="e2e: not run (VIBEPIT_TEST_NO_E2E)"
elif start_docker; then
  # A run that was interrupted leaves its networks in the engine's state, and their
  # documentation-range subnets would collide with this run's ("Pool overlaps").
  remove_test_objects
  if start_podman; then
    DOCKER_HOST="unix://$podman_socket" remove_test_objects
  else
    echo "test: the Podman e2e tests will fail: no Podman API" >&2
  fi
  if start_podman_rootless; then
    DOCKER_HOST="unix://$rootless_socket" remove_test_objects
    export VIBEPIT_E2E_WORKDIR="$rootless_workdir"
  else
    echo "test: the rootless Podman e2e tests will fail: no rootless Podman API" >&2
  fi
  trap cleanup_engines EXIT
  trap 'exit 130' INT TERM
else
  echo "test: the e2e tests will fail: no Docker engine" >&2
fi

passed=0
failed=0
summary_e2e="${summary_e2e:-}"
status=0
summary=()

# How long each stage's build and tests took, on each summary line: CI's budget is 90 min,
# and this says where it goes.
build_s=0
minutes() {  # seconds -> "12m05s"
  printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
}

run_ctest() {  # name, build dir, extra ctest args...
  local name="$1" dir="$2"
  shift 2
  local log="$dir/ctest-${name//[ |]/-}.log"
  local t0=$SECONDS
  ctest --test-dir "$dir" --output-on-failure --timeout 900 "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local took="tests $(minutes $((SECONDS - t0)))"
  [ "$build_s" -eq 0 ] || took="build $(minutes "$build_s"), $took"
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  local total fail
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$line")
  fail=$(sed -E 's/.* ([0-9]+) tests? failed.*/\1/' <<<"$line")
  if [ -z "$line" ] || [ "${total:-0}" -eq 0 ]; then
    echo "test: $name ran no tests" >&2
    failed=$((failed + 1))
    status=1
    summary+=("$name: no tests ran ($took)")
    return
  fi
  # A skipped test counts as a failure here: the suite installs everything it needs.
  local skipped
  skipped=$(grep -cF '***Skipped' "$log" || true)
  passed=$((passed + total - fail - skipped))
  failed=$((failed + fail + skipped))
  [ "$rc" -eq 0 ] && [ "$skipped" -eq 0 ] || status=1
  local names
  names=$(sed -n '/The following tests FAILED:/,/^Errors while running/p' "$log" |
    sed -n -E 's/^[[:space:]]*[0-9]+ - (.*) \((Failed|Timeout|Not Run|SEGFAULT|Exception|Skipped)\)$/\1/p' |
    tr '\n' ' ')
  names="${names% }"
  summary+=("$name: $((total - fail - skipped)) passed, $((fail + skipped)) failed ($skipped of them skipped; $took)${names:+: $names}")
  [ -z "$names" ] || digest_failures "$name" "$log"
}

# What a failed test said, in a few lines: its verdict line and the lines that carry an
# assertion or a sanitizer report. .ci/run prints this last, where a tail of its output
# still shows it.
failures=()
digest_failures() {  # stage name, ctest log
  local lines
  lines=$(grep -E -e '\*\*\*(Failed|Timeout|Exception|Skipped)|SEGFAULT' \
    -e ': Failure$|^(  )?(Expected|Which is|Value of|  Actual|Expected:)' \
    -e '^E  |Error: |AssertionError|^(FAIL|ERROR):' \
    -e 'runtime error:|^SUMMARY: |WARNING: ThreadSanitizer|ERROR: (Address|Leak)Sanitizer' "$2" |
    sed -E 's/ \.{4,}/ /' | cut -c1-300 | head -n 40)
  failures+=("-- $1 --" "$lines")
}

build_cache=""  # the last build's "hits=H misses=M"
build_or_fail() {  # preset, configure args...
  local t0=$SECONDS before after
  before=$(ccache_counts)
  if ! scripts/build.sh "$@"; then
    echo "test: build of preset $1 failed" >&2
    summary+=("$1: BUILD FAILED after $(minutes $((SECONDS - t0)))")
    failed=$((failed + 1))
    status=1
    return 1
  fi
  build_s=$((SECONDS - t0))
  after=$(ccache_counts)
  build_cache=""
  if [ -n "$before" ] && [ -n "$after" ]; then
    local h0 m0 h1 m1
    read -r h0 m0 <<<"$before"
    read -r h1 m1 <<<"$after"
    build_cache="hits=$((h1 - h0)) misses=$((m1 - m0))"
  fi
}

# A stage: its build, its unit tests side by side (they share nothing and most of their
# time is waiting), then its slower tests one at a time (each starts proxies and load of
# its own, and some check that a deadline holds).
stage() {  # name, build dir, labels run one at a time, preset's configure args...
  local name="$1" dir="$2" serial="$3"
  shift 3
  if build_or_fail "$name" "$@"; then
    step_done "$name-build" "$build_cache"
    run_ctest "$name unit" "$dir" -L '^unit$' -j "$(nproc)"
    build_s=0
    run_ctest "$name $serial" "$dir" -L "^($serial)\$"
  fi
  step_done "$name-tests"
}

step_done deps

# Lint, before anything is built: the C++ as .clang-format lays it out, and the Python
# (bench/, tests/, scripts/) as .flake8 asks. Seconds, and a failure names the file.
lint() {
  local rc=0 files
  mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
  if ! clang-format --dry-run --Werror "${files[@]}"; then
    echo "test: C++ not formatted as .clang-format says: run clang-format -i on the files above" >&2
    rc=1
  fi
  if ! flake8 bench tests scripts; then
    echo "test: flake8 found the above in bench/, tests/ or scripts/" >&2
    rc=1
  fi
  if [ "$rc" -eq 0 ]; then
    summary+=("lint: clang-format and flake8 clean (${#files[@]} C++ files)")
  else
    summary+=("lint: FAILED (clang-format or flake8; see above)")
    failed=$((failed + 1))
    status=1
  fi
}
lint
step_done lint
if [ -n "${VIBEPIT_TEST_NO_E2E:-}" ]; then
  stage release build 'integration|soak' -DVIBEPIT_TESTS=ON -DVIBEPIT_BENCH=ON
else
  stage release build 'integration|e2e|e2e-podman|e2e-podman-rootless|soak' \
    -DVIBEPIT_TESTS=ON -DVIBEPIT_BENCH=ON
fi
# clang-tidy (.clang-tidy) over the libraries and programs, on the release build's compile
# commands. Files found clean before are remembered (scripts/tidy.py says how), so this
# takes seconds on a machine that has checked vibepit before.
tidy() {
  local log="build/tidy.log" cache=""
  python3 -m scripts.tidy --build-dir build 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  [[ "$(tail -1 "$log")" =~ (hits=[0-9]+\ misses=[0-9]+) ]] && cache="${BASH_REMATCH[1]}"
  if [ "$rc" -eq 0 ]; then
    summary+=("tidy: clean ($(tail -1 "$log" | sed 's/^tidy: //'))")
  else
    summary+=("tidy: FAILED (clang-tidy found the above, or could not run)")
    failures+=("-- tidy --" "$(grep -E '(error|warning): ' "$log" | cut -c1-300 | head -n 20)")
    failed=$((failed + 1))
    status=1
  fi
  step_done tidy "$cache"
}
if [ -f build/compile_commands.json ]; then
  tidy
else
  summary+=("tidy: not run (no release build)")
  failed=$((failed + 1))
  status=1
fi
if [ -n "$quick" ]; then
  summary+=("asan, tsan, fuzz: not run (--quick)")
else
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    stage asan build-asan integration
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 stage tsan build-tsan integration
  # The fuzz targets each run for a fixed time on one core: two at once on two cores.
  if build_or_fail fuzz; then
    step_done fuzz-build "$build_cache"
    run_ctest fuzz build-fuzz -L fuzz -j "$(nproc)"
  fi
  step_done fuzz-run
fi

echo
[ -z "$summary_e2e" ] || summary+=("$summary_e2e")
print_summary() {
  echo "== test summary =="
  for s in "${summary[@]}"; do echo "  $s"; done
  echo "all: $passed passed, $failed failed"
  echo "  (this script took $(minutes "$SECONDS") in all)"
}
print_summary
if [ -n "${VIBEPIT_TEST_SUMMARY:-}" ]; then
  {
    print_summary
    if [ "${#failures[@]}" -gt 0 ]; then
      echo "== what the failed tests said =="
      printf '%s\n' "${failures[@]}"
    fi
  } >"$VIBEPIT_TEST_SUMMARY"
fi
exit "$status"
