#!/usr/bin/env bash
# A fuzzing campaign, run by hand (not in CI): each libFuzzer target for MINUTES (default 30)
# from its campaign corpus and the tree's seeds; then the tree's seeds are minimised again
# (below). Prints one line per target (executions, coverage, features, seeds before and
# after) and appends it as JSON to the ledger kept in the tree, tests/fuzz/campaign.ndjson;
# python3 -m scripts.fuzz_report puts those figures in docs/security.md.
#   scripts/fuzz-campaign.sh [--minutes N] [--jobs J] [TARGET...]   (default: every target)
#   scripts/fuzz-campaign.sh --minimise [TARGET...]   only minimise the tree's seeds again
# --jobs runs J targets side by side, one core each (taskset), so J should not exceed the
# cores. A crash stops that target, keeps its input under build-fuzz/campaign/, and makes
# the exit status 1.
#
# Two corpora per target. The campaign's own, every input that added a feature, grows
# from campaign to campaign outside the tree: $VIBEPIT_FUZZ_CORPUS/TARGET (default
# /var/cache/vibepit/fuzz-corpus). The tree's, tests/fuzz/corpus/TARGET, is a seed set:
# its named seeds (hand-made inputs and past crashes, each named for what it is, always
# kept) and the fewest other inputs that reach every edge either corpus reaches
# (libFuzzer's -merge=1 with -use_counters=0: edges, not hit counts), named by their SHA-1.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
minutes=30
jobs=1
minimise_only=""
targets=()
cache="${VIBEPIT_FUZZ_CORPUS:-/var/cache/vibepit/fuzz-corpus}"
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --minimise) minimise_only=1; shift ;;
    -h | --help) sed -n '2,18s/^# \{0,1\}//p' "$0"; exit 0 ;;
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

# The edges a corpus reaches: libFuzzer's cov once it has run every input.
edges() {  # exe dir
  "$1" -runs=0 -rss_limit_mb=2048 -timeout=10 "$2" 2>&1 | sed -n -E 's/.*INITED cov: ([0-9]+).*/\1/p' | tail -1
}

# The tree's seeds again: the named ones, and the fewest inputs of the tree and the campaign
# corpus that reach every edge beyond them. Prints "edges before, edges after".
minimise_into_tree() {  # exe core corpus work campaign
  local exe="$1" core="$2" corpus="$3" work="$4" campaign="$5"
  rm -rf "$work/seeds" && mkdir -p "$work/seeds"
  find "$corpus" -maxdepth 1 -type f -regextype posix-extended ! -regex '.*/[0-9a-f]{40}' \
    -exec cp {} "$work/seeds"/ \;
  taskset -c "$core" "$exe" -merge=1 -use_counters=0 -rss_limit_mb=2048 -timeout=10 \
    "$work/seeds" "$corpus" "$campaign" >"$work/merge.log" 2>&1 || return 1
  local before after
  before=$(edges "$exe" "$corpus")
  after=$(edges "$exe" "$work/seeds")
  # A few targets reach a few edges more or less from run to run over the same inputs
  # (fuzz_config: 2 512 to 2 517): 0.5% less is the same coverage.
  if [ -z "$after" ] || [ $((${after:-0} * 1000)) -lt $((${before:-0} * 995)) ]; then
    echo "fuzz-campaign: $(basename "$exe"): the minimised seeds reach $after edges, the tree's $before: kept the tree's" >&2
    return 1
  fi
  find "$corpus" -maxdepth 1 -type f -delete
  cp "$work/seeds"/* "$corpus"/
  echo "$before $after"
}

one() {  # target core
  local t="$1" core="$2"
  local exe="build-fuzz/bin/$t" corpus="tests/fuzz/corpus/$t" work="$out/$t"
  local campaign="$cache/$t"
  rm -rf "$work" && mkdir -p "$work/artifacts" "$campaign"
  if [ -n "$minimise_only" ]; then
    local e
    e=$(minimise_into_tree "$exe" "$core" "$corpus" "$work" "$campaign") || return 1
    echo "$t: $(find "$corpus" -type f | wc -l) seeds, edges $e (before, after)"
    return 0
  fi
  local before
  before=$(find "$corpus" -type f | wc -l)
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 taskset -c "$core" "$exe" -max_total_time=$((minutes * 60)) \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
    "$campaign" "$corpus" >"$work/fuzz.log" 2>&1 || rc=$?
  local execs cov ft
  execs=$(sed -n -E 's/^stat::number_of_executed_units: ([0-9]+)/\1/p' "$work/fuzz.log" | tail -1)
  cov=$(grep -E '^#[0-9]+' "$work/fuzz.log" | sed -n -E 's/.* cov: ([0-9]+).*/\1/p' | tail -1)
  ft=$(grep -E '^#[0-9]+' "$work/fuzz.log" | sed -n -E 's/.* ft: ([0-9]+).*/\1/p' | tail -1)
  minimise_into_tree "$exe" "$core" "$corpus" "$work" "$campaign" >/dev/null
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
