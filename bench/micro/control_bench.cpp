// Microbenchmarks for runtime rule changes: compiling and publishing a whole snapshot, and
// adding one rule through the control API's updater to a snapshot that holds many.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <string>

#include "rule_sets.hpp"
#include "vibepit/control/rule_updater.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace {

using namespace vibepit;

// Compile n allow-http and n allow-dns entries and publish the snapshot. The counter
// `snapshot_MiB` is the heap the compiled snapshot holds (glibc's in-use bytes before and
// after compiling, with the snapshot alive).
void BM_CompileAndPublish(benchmark::State& state) {
  const auto rules = bench::rules_of(state.range(0));
  policy::SnapshotStore store(nullptr);
  double bytes = 0;
  for (auto _ : state) {
    // mallinfo2() walks the allocator's free lists, longer after each iteration: outside
    // the timing (it was a sixth of the time at ten iterations).
    state.PauseTiming();
    auto before = mallinfo2().uordblks;
    state.ResumeTiming();
    auto snap = std::get<std::shared_ptr<policy::Snapshot>>(policy::compile_mutable(rules));
    state.PauseTiming();
    bytes = static_cast<double>(mallinfo2().uordblks - before);
    state.ResumeTiming();
    store.publish(std::move(snap));  // frees the previous iteration's snapshot: a reload does
  }
  state.counters["snapshot_MiB"] = bytes / (1024.0 * 1024.0);
  state.counters["bytes_per_rule"] = bytes / static_cast<double>(2 * state.range(0));
}
BENCHMARK(BM_CompileAndPublish)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

// One `POST /v1/allow-http` of a new entry onto a store that holds n rules per list. Each
// iteration starts from the same n-rule snapshot, so the size does not creep up.
void BM_AddOneRule(benchmark::State& state) {
  const auto base = std::get<std::shared_ptr<const policy::Snapshot>>(
      policy::compile(bench::rules_of(state.range(0)), 1));
  for (auto _ : state) {
    state.PauseTiming();
    {
      policy::SnapshotStore store(base);
      control::RuleUpdater updater(store);
      state.ResumeTiming();
      auto r = updater.add(control::RuleList::allow_http, {"added.test:443"});
      benchmark::DoNotOptimize(r);
      state.PauseTiming();
    }  // the store and the new snapshot are freed untimed
    state.ResumeTiming();
  }
}
BENCHMARK(BM_AddOneRule)->Arg(10)->Arg(1000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
