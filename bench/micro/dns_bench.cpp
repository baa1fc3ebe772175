// Microbenchmarks for the DNS paths that run for every query a sandbox sends and never reach
// the upstream: a denied name answered REFUSED, and a cache hit. Neither allocates.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/dns/cache.hpp"
#include "vibepit/dns/filter.hpp"
#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace {

using namespace vibepit;
using namespace vibepit::dns;
using Bytes = std::vector<std::uint8_t>;

void put_name(Bytes& b, std::string_view dotted) {
  while (!dotted.empty()) {
    const auto dot = dotted.find('.');
    const std::string_view label = dotted.substr(0, dot);
    b.push_back(static_cast<std::uint8_t>(label.size()));
    b.insert(b.end(), label.begin(), label.end());
    dotted = dot == std::string_view::npos ? std::string_view{} : dotted.substr(dot + 1);
  }
  b.push_back(0);
}

// A query as dig sends it: RD, an OPT with payload 1232 and a cookie option.
Bytes query(std::string_view name, std::uint16_t type) {
  Bytes b = {0xab, 0xcd, 0x01, 0x20, 0, 1, 0, 0, 0, 0, 0, 1};
  put_name(b, name);
  b.insert(b.end(), {static_cast<std::uint8_t>(type >> 8), static_cast<std::uint8_t>(type), 0, 1});
  b.insert(b.end(), {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 12, 0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8});
  return b;
}

// An upstream answer to `name` A: two addresses and an OPT.
Bytes answer(std::string_view name) {
  Bytes b = {0, 0, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 1};
  put_name(b, name);
  b.insert(b.end(), {0, 1, 0, 1});
  for (std::uint8_t last : {7, 8}) {
    b.insert(b.end(), {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 203, 0, 113, last});
  }
  b.insert(b.end(), {0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0});
  return b;
}

// About 1000 allow-dns rules, half exact names and half wildcards, as a large session has.
const policy::Snapshot& snapshot() {
  static const std::shared_ptr<const policy::Snapshot> snap = [] {
    policy::RuleSet rules;
    for (int i = 0; i < 500; ++i) {
      rules.allow_dns.push_back("host" + std::to_string(i) + ".exact.test");
      rules.allow_dns.push_back("*.zone" + std::to_string(i) + ".example.com");
    }
    return std::get<std::shared_ptr<const policy::Snapshot>>(policy::compile(rules, 1));
  }();
  return *snap;
}

void BM_DnsDeniedQuery(benchmark::State& state) {
  const policy::Snapshot& snap = snapshot();
  const QtypeSet types;
  const Bytes pkt = query("telemetry.tracker.zone7.example.org", qtype::A);
  std::array<std::uint8_t, 512> out;
  Query q;
  for (auto _ : state) {
    if (parse_query(pkt, q) != WireError::none) state.SkipWithError("parse failed");
    const QueryVerdict v = check_query(q, snap, types);
    if (v.action != QueryAction::deny) state.SkipWithError("not denied");
    const std::size_t n = build_error(pkt, q, Rcode::refused, 1232, out);
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DnsDeniedQuery);

void BM_DnsCacheHit(benchmark::State& state) {
  const policy::Snapshot& snap = snapshot();
  const QtypeSet types;
  const std::string_view name = "api.zone7.example.com";
  const Bytes pkt = query(name, qtype::A);
  const Bytes up = answer(name);
  Query q;
  ResponseInfo info;
  if (parse_query(pkt, q) != WireError::none || parse_response(up, q, info) != WireError::none) {
    state.SkipWithError("setup failed");
    return;
  }
  Cache cache;
  const Cache::clock::time_point t0 = Cache::clock::now();
  cache.insert(q, up, info, t0);
  const Cache::clock::time_point later = t0 + std::chrono::seconds(5);
  std::array<std::uint8_t, 1232> out;
  for (auto _ : state) {
    if (parse_query(pkt, q) != WireError::none) state.SkipWithError("parse failed");
    const QueryVerdict v = check_query(q, snap, types);
    if (v.action != QueryAction::forward) state.SkipWithError("not allowed");
    const Cache::Hit hit = cache.lookup(pkt, q, later, udp_reply_limit(q, 1232), 1232, out);
    if (hit.size == 0) state.SkipWithError("cache miss");
    benchmark::DoNotOptimize(hit);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DnsCacheHit);

}  // namespace
