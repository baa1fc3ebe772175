// Microbenchmarks for the decision log's writer: what it does with each record the I/O
// threads push, on a core it may share with them. It formats the record as its NDJSON line,
// and with the control API running it first counts it for /v1/stats and /metrics. Together
// that is the length of its stretches per record (docs/benchmarks.md, the DNS notes).
#include <benchmark/benchmark.h>

#include <string>

#include "vibepit/control/stats.hpp"
#include "vibepit/decision_log/decision_log.hpp"

namespace {

using namespace vibepit;

// A keep-alive GET allowed and completed: the record the proxy writes for every request.
decision_log::DecisionRecord http_request() {
  decision_log::DecisionRecord r;
  r.id = 123'456'789;
  r.ts_us = 1'764'440'000'123'456;
  r.client = "192.0.2.2:40312";
  r.method = "GET";
  r.host = "h.cached.test";
  r.port = 80;
  r.verdict = policy::Verdict::allow;
  r.reason = policy::Reason::allowlisted;
  r.rule = "*.cached.test:*";
  r.addr = "198.51.100.10:80";
  r.status = 200;
  r.gen = 3;
  r.elapsed_us = 41;
  r.totals = true;
  r.bytes_up = 96;
  r.bytes_down = 1'024;
  r.ms = 1;
  return r;
}

// A DNS query answered from upstream: address and port are formatted by the writer.
decision_log::DecisionRecord dns_answer() {
  decision_log::DecisionRecord r;
  r.id = 123'456'790;
  r.ts_us = 1'764'440'000'123'999;
  r.src = "dns";
  r.client_ip = *policy::IpAddr::parse("192.0.2.2");
  r.client_port = 53'124;
  r.transport = "udp";
  r.host = "n12345.miss.test";
  r.qtype = 1;
  r.rcode = "NOERROR";
  r.addrs = {*policy::IpAddr::parse("198.51.100.10")};
  r.verdict = policy::Verdict::allow;
  r.reason = policy::Reason::allowlisted;
  r.rule = "*.miss.test";
  r.gen = 3;
  r.elapsed_us = 95;
  return r;
}

void format(benchmark::State& state, const decision_log::DecisionRecord& r) {
  std::string out;
  for (auto _ : state) {
    out.clear();  // as the writer's batch: grown once, reused
    decision_log::append_json_line(out, r);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * out.size()));
}

void BM_FormatHttpRecord(benchmark::State& state) {
  format(state, http_request());
}
BENCHMARK(BM_FormatHttpRecord);

void BM_FormatDnsRecord(benchmark::State& state) {
  format(state, dns_answer());
}
BENCHMARK(BM_FormatDnsRecord);

void count(benchmark::State& state, const decision_log::DecisionRecord& r) {
  control::DecisionStats stats;
  for (auto _ : state) stats.observe(r);
  benchmark::DoNotOptimize(stats.tracked_hosts());
}

void BM_CountHttpRecord(benchmark::State& state) {
  count(state, http_request());
}
BENCHMARK(BM_CountHttpRecord);

void BM_CountDnsRecord(benchmark::State& state) {
  count(state, dns_answer());
}
BENCHMARK(BM_CountDnsRecord);

}  // namespace
