// Microbenchmarks for the policy engine: the work done for every request and every
// resolved address. Matching must stay flat as the rule count grows from 10 to 100000.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rule_sets.hpp"
#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace {

using namespace vibepit::policy;
using vibepit::bench::rules_of;

// Built once per size: compiling 100000 rules is setup, not the thing measured.
const Snapshot& snapshot_of(std::int64_t n) {
  static std::map<std::int64_t, std::shared_ptr<const Snapshot>> cache;
  auto& slot = cache[n];
  if (!slot) slot = std::get<std::shared_ptr<const Snapshot>>(compile(rules_of(n), 1));
  return *slot;
}

struct Query {
  std::string host;
  std::uint16_t port;
};

// Hits at a realistic depth, spread over the rule set, and misses of the same shape.
std::vector<Query> queries(std::int64_t n, bool hit) {
  std::vector<Query> out;
  std::int64_t zones = n / 2;
  for (std::int64_t i = 0; i < 8; ++i) {
    std::string k = std::to_string((i * 7919) % zones);
    if (hit) {
      out.push_back(i % 2 == 0 ? Query{"host" + k + ".exact.test", 443}
                               : Query{"a.b.c.d.zone" + k + ".example.com", 8080});
    } else {
      out.push_back(i % 2 == 0 ? Query{"nohost" + k + ".exact.test", 443}
                               : Query{"a.b.c.d.nozone" + k + ".example.com", 8080});
    }
  }
  return out;
}

void BM_HttpMatch(benchmark::State& state, bool hit) {
  const Snapshot& snap = snapshot_of(state.range(0));
  const auto qs = queries(state.range(0), hit);
  std::size_t i = 0;
  for (auto _ : state) {
    const Query& q = qs[i++ % qs.size()];
    const HttpRule* r = snap.http.match(q.host, q.port);
    if ((r != nullptr) != hit) state.SkipWithError("unexpected match result");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_HttpMatch, hit, true)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK_CAPTURE(BM_HttpMatch, miss, false)->Arg(10)->Arg(1000)->Arg(100000);

void BM_DnsMatch(benchmark::State& state, bool hit) {
  const Snapshot& snap = snapshot_of(state.range(0));
  const auto qs = queries(state.range(0), hit);
  std::size_t i = 0;
  for (auto _ : state) {
    const DnsRule* r = snap.dns.match(qs[i++ % qs.size()].host);
    if ((r != nullptr) != hit) state.SkipWithError("unexpected match result");
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_DnsMatch, hit, true)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK_CAPTURE(BM_DnsMatch, miss, false)->Arg(10)->Arg(1000)->Arg(100000);

// The whole decision for a name: validation, normalisation check, match, Decision record.
void BM_DecideHttp(benchmark::State& state) {
  const Snapshot& snap = snapshot_of(state.range(0));
  const auto qs = queries(state.range(0), true);
  std::size_t i = 0;
  for (auto _ : state) {
    const Query& q = qs[i++ % qs.size()];
    benchmark::DoNotOptimize(decide_http(q.host, q.port, snap));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecideHttp)->Arg(10)->Arg(100000);

void BM_Classify(benchmark::State& state, const char* text) {
  const Classifier classifier({*Cidr::parse("198.51.100.0/24")});
  const IpAddr addr = *IpAddr::parse(text);
  for (auto _ : state) benchmark::DoNotOptimize(classifier.classify(addr));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK_CAPTURE(BM_Classify, v4_allowed, "203.0.113.7");
BENCHMARK_CAPTURE(BM_Classify, v4_blocked, "10.1.2.3");
BENCHMARK_CAPTURE(BM_Classify, v6_allowed, "2001:db8::1");
BENCHMARK_CAPTURE(BM_Classify, v6_blocked, "fd00::1");
BENCHMARK_CAPTURE(BM_Classify, mapped_allowed, "::ffff:203.0.113.7");
BENCHMARK_CAPTURE(BM_Classify, mapped_blocked, "::ffff:127.0.0.1");

void BM_IpParse(benchmark::State& state, const char* text) {
  for (auto _ : state) benchmark::DoNotOptimize(IpAddr::parse(text));
}
BENCHMARK_CAPTURE(BM_IpParse, v4, "203.0.113.7");
BENCHMARK_CAPTURE(BM_IpParse, v6, "2001:db8::1");

// Reading the current snapshot while another thread publishes. The publisher is started
// in Setup and stopped in Teardown; its interval (microseconds between publishes, 0 for
// back to back) is the benchmark argument, and -1 means it never publishes. The thread is
// started even then: libstdc++ skips atomic reference counting while a process has only
// ever had one thread, which would flatter the first run.
struct Publisher {
  SnapshotStore store{nullptr};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> published{0};
  std::thread thread;
};
Publisher* g_publisher = nullptr;

void publisher_setup(const benchmark::State& state) {
  g_publisher = new Publisher;
  const std::int64_t interval_us = state.range(0);
  g_publisher->thread = std::thread([p = g_publisher, interval_us] {
    RuleSet rules{{"example.com:443", "*.example.com:8*"}, {"example.com"}, {}};
    while (!p->stop.load(std::memory_order_relaxed)) {
      if (interval_us < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      p->store.publish(std::get<std::shared_ptr<Snapshot>>(compile_mutable(rules)));
      p->published.fetch_add(1, std::memory_order_relaxed);
      if (interval_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(interval_us));
    }
  });
}

void publisher_teardown(const benchmark::State&) {
  g_publisher->stop.store(true);
  if (g_publisher->thread.joinable()) g_publisher->thread.join();
  delete g_publisher;
  g_publisher = nullptr;
}

void BM_SnapshotCurrent(benchmark::State& state) {
  SnapshotStore& store = g_publisher->store;
  const std::uint64_t before = g_publisher->published.load();
  for (auto _ : state) {
    auto snap = store.current();
    benchmark::DoNotOptimize(snap->generation);
  }
  state.counters["publishes"] = static_cast<double>(g_publisher->published.load() - before);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SnapshotCurrent)
    ->ArgName("publish_every_us")
    ->Arg(-1)
    ->Arg(1000)
    ->Arg(0)
    ->Setup(publisher_setup)
    ->Teardown(publisher_teardown);

}  // namespace
