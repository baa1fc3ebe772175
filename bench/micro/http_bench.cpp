// Microbenchmarks for the HTTP parsing layer: the work done once per request before policy.
#include <benchmark/benchmark.h>

#include <string>

#include "vibepit/http/authority.hpp"
#include "vibepit/http/body.hpp"
#include "vibepit/http/head.hpp"

namespace {

using namespace vibepit::http;

const std::string kConnect =
    "CONNECT api.github.com:443 HTTP/1.1\r\n"
    "Host: api.github.com:443\r\n"
    "User-Agent: curl/8.5.0\r\n"
    "Proxy-Connection: Keep-Alive\r\n"
    "\r\n";

const std::string kGet =
    "GET http://deb.debian.org/debian/dists/bookworm/InRelease HTTP/1.1\r\n"
    "Host: deb.debian.org\r\n"
    "User-Agent: Debian APT-HTTP/1.3 (2.6.1)\r\n"
    "Accept: */*\r\n"
    "Accept-Encoding: gzip, deflate\r\n"
    "Accept-Language: en-US,en;q=0.9\r\n"
    "Cache-Control: max-age=0\r\n"
    "If-Modified-Since: Sat, 10 Feb 2024 09:14:45 GMT\r\n"
    "Proxy-Connection: keep-alive\r\n"
    "Referer: http://deb.debian.org/debian/\r\n"
    "X-Request-Id: 4f1c2b7e-8d3a-4e5f-9a6b-0c1d2e3f4a5b\r\n"
    "\r\n";

void BM_ParseConnectHead(benchmark::State& state) {
  RequestHead head;
  for (auto _ : state) {
    benchmark::DoNotOptimize(parse_request_head(kConnect, 16384, head));
    benchmark::DoNotOptimize(head.head_size);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kConnect.size()));
}
BENCHMARK(BM_ParseConnectHead);

void BM_ParseGetHead(benchmark::State& state) {
  RequestHead head;
  for (auto _ : state) {
    benchmark::DoNotOptimize(parse_request_head(kGet, 16384, head));
    benchmark::DoNotOptimize(head.head_size);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kGet.size()));
}
BENCHMARK(BM_ParseGetHead);

void BM_ParseAuthority(benchmark::State& state) {
  for (auto _ : state) {
    auto r = parse_authority("api.github.com:443", std::nullopt);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ParseAuthority);

void BM_ParseAuthorityIpv4(benchmark::State& state) {
  for (auto _ : state) {
    auto r = parse_authority("203.0.113.7:8080", std::nullopt);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ParseAuthorityIpv4);

void BM_ParseTargetAbsolute(benchmark::State& state) {
  RequestHead head;
  parse_request_head(kGet, 16384, head);
  for (auto _ : state) {
    auto r = parse_target(head.method, head.target);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_ParseTargetAbsolute);

void BM_RequestFraming(benchmark::State& state) {
  RequestHead head;
  parse_request_head(kGet, 16384, head);
  for (auto _ : state) {
    auto r = request_framing(head);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_RequestFraming);

void BM_RewriteRequestHead(benchmark::State& state) {
  RequestHead head;
  parse_request_head(kGet, 16384, head);
  for (auto _ : state) {
    auto out = rewrite_request_head(head, "/debian/dists/bookworm/InRelease", "deb.debian.org");
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_RewriteRequestHead);

void BM_ChunkedDecoder(benchmark::State& state) {
  std::string body;
  for (int i = 0; i < 64; ++i) body += "400\r\n" + std::string(1024, 'x') + "\r\n";
  body += "0\r\n\r\n";
  for (auto _ : state) {
    ChunkedDecoder d;
    benchmark::DoNotOptimize(d.feed(body));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChunkedDecoder);

}  // namespace
