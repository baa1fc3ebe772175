// Microbenchmarks for TLS as the proxy takes part in it: reading a tunnel's ClientHello
// (the SNI check, once per tunnel), and the inspection CA's leaf certificates, issued once
// per inspected host and then found in the cache (once per inspected connection).
#include <benchmark/benchmark.h>

#include <fstream>
#include <iterator>
#include <string>

#include "vibepit/tls/client_hello.hpp"
#include "vibepit/tls/inspection_ca.hpp"

namespace {

using namespace vibepit::tls;

// curl 7.88's ClientHello (517 bytes), as tests/unit/tls/client_hellos recorded it.
std::string curl_hello() {
  std::ifstream in(std::string(VIBEPIT_CLIENT_HELLOS) + "/curl.bin", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void BM_ReadClientHello(benchmark::State& state) {
  const std::string hello = curl_hello();
  if (hello.empty()) state.SkipWithError("no recorded ClientHello");
  for (auto _ : state) {
    auto r = read_client_hello(hello);
    benchmark::DoNotOptimize(r.has_server_name());
    if (!same_name(r.server_name(), "curl.sni.test")) state.SkipWithError("wrong name");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * hello.size()));
}
BENCHMARK(BM_ReadClientHello);

// A new host each time: a P-256 key and a signature.
void BM_InspectionLeafIssued(benchmark::State& state) {
  InspectionCa::Options o;
  o.max_leaves = 64;
  InspectionCa ca(o);
  std::uint64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(ca.leaf("h" + std::to_string(i++) + ".test"));
}
BENCHMARK(BM_InspectionLeafIssued)->Unit(benchmark::kMicrosecond);

// The same host again: the cache.
void BM_InspectionLeafCached(benchmark::State& state) {
  InspectionCa ca(InspectionCa::Options{});
  ca.leaf("api.github.com");
  for (auto _ : state) benchmark::DoNotOptimize(ca.leaf("api.github.com"));
}
BENCHMARK(BM_InspectionLeafCached);

}  // namespace
