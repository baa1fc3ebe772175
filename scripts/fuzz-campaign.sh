#!/usr/bin/env bash
# A fuzzing campaign, run by hand (not in CI): each libFuzzer target for MINUTES (default 30)
# from its corpus in tests/fuzz/corpus; then the inputs that add coverage (-merge=1) are
# written back to the tree beside the named seeds. Prints one line per target (executions,
# coverage, features, corpus before and after) and appends it as JSON to the ledger kept in
# the tree, tests/fuzz/campaign.ndjson; scripts/fuzz-report.py puts those figures in
# docs/security.md.
#   scripts/fuzz-campaign.sh [--minutes N] [--jobs J] [TARGET...]   (default: every target)
# --jobs runs J targets side by side, one core each (taskset), so J should not exceed the
# cores. A crash stops that target, keeps its input under build-fuzz/campaign/, and makes
# the exit status 1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
minutes=30
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
scripts/install-deps.sh --test || exit 1
scripts/build.sh fuzz || exit 1
if [ ${#targets[@]} -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
for t in "${targets[@]}"; do
  if [ ! -x "build-fuzz/bin/$t" ] || [ ! -d "tests/fuzz/corpus/$t" ]; then
    echo "fuzz-campaign: no target $t (the targets: $(cd tests/fuzz/corpus && echo *))" >&2
    exit 2
  fi
done
out=build-fuzz/campaign
mkdir -p "$out"

# The tree's corpus keeps its named seeds (hand-made inputs and past crashes, each named for
# what it is) and gains the fewest inputs from the run that add coverage to them: libFuzzer's
# -merge=1 into a copy of the seeds copies only inputs with new features.
merge_into_tree() {  # exe core corpus work
  local exe="$1" core="$2" corpus="$3" work="$4"
  rm -rf "$work/merged" && mkdir -p "$work/merged"
  cp "$corpus"/* "$work/merged"/ 2>/dev/null
  taskset -c "$core" "$exe" -merge=1 -rss_limit_mb=2048 -timeout=10 "$work/merged" \
    "$work/run" >"$work/merge.log" 2>&1 || return 1
  cp -n "$work/merged"/* "$corpus"/
}

one() {  # target core
  local t="$1" core="$2"
  local exe="build-fuzz/bin/$t" corpus="tests/fuzz/corpus/$t" work="$out/$t"
  rm -rf "$work" && mkdir -p "$work/run" "$work/merged" "$work/artifacts"
  local before
  before=$(find "$corpus" -type f | wc -l)
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 taskset -c "$core" "$exe" -max_total_time=$((minutes * 60)) \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$work/run" "$corpus" >"$work/fuzz.log" 2>&1 || rc=$?
  local execs cov ft
  execs=$(sed -n -E 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$work/fuzz.log" | tail -1)
  cov=$(grep -E '^#[0-9]+' "$work/fuzz.log" | sed -n -E 's/.* cov: ([0-9]+).*/\1/p' | tail -1)
  ft=$(grep -E '^#[0-9]+' "$work/fuzz.log" | sed -n -E 's/.* ft: ([0-9]+).*/\1/p' | tail -1)
  merge_into_tree "$exe" "$core" "$corpus" "$work"
  local after
  after=$(find "$corpus" -type f | wc -l)
  local crashes
  crashes=$(find "$work/artifacts" -type f | wc -l)
  printf '{"target":"%s","minutes":%s,"execs":%s,"cov":%s,"ft":%s,"corpus_before":%s,"corpus_after":%s,"exit":%s,"crashes":%s,"when":"%s"}\n' \
    "$t" "$minutes" "${execs:-0}" "${cov:-0}" "${ft:-0}" "$before" "$after" "$rc" "$crashes" \
    "$(date -u +%FT%TZ)" | tee -a tests/fuzz/campaign.ndjson
  [ "$rc" -eq 0 ] && [ "$crashes" -eq 0 ]
}

status=0
i=0
pids=()
for t in "${targets[@]}"; do
  one "$t" $((i % jobs)) &
  pids+=($!)
  i=$((i + 1))
  if [ ${#pids[@]} -ge "$jobs" ]; then
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    pids=()
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit "$status"
