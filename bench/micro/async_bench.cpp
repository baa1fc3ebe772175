// What the async idiom costs per DNS query, to decide between callbacks and coroutines on
// the DNS server's forwarding path (docs/code-map.md, "Async style"). One "query" is what a
// cache miss does on the event loop: it starts, waits for one completion (the upstream's
// answer), then finishes. Both variants run the same loop, one thread, 1 000 queries in
// flight per batch; only the way the waiting state is kept differs.
#include <benchmark/benchmark.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <memory>

namespace {

constexpr int kBatch = 1000;

// As the DNS worker does today: a heap object per query holds its state, and the
// completion is a callback that finds it again.
struct Pending {
  int id;
  int* done;
};

void BM_QueryAsCallback(benchmark::State& state) {
  asio::io_context io{1};
  int done = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      auto p = std::make_unique<Pending>(Pending{i, &done});
      asio::post(io, [p = std::move(p), &io]() mutable {     // the upstream answers
        asio::post(io, [p = std::move(p)] { ++*p->done; });  // the reply is sent
      });
    }
    io.run();
    io.restart();
  }
  benchmark::DoNotOptimize(done);
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_QueryAsCallback);

// The same as a coroutine per query: the frame holds the state across the wait.
void BM_QueryAsCoroutine(benchmark::State& state) {
  asio::io_context io{1};
  int done = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      asio::co_spawn(
          io,
          [&io, &done]() -> asio::awaitable<void> {
            co_await asio::post(io, asio::use_awaitable);  // the upstream answers
            ++done;                                        // the reply is sent
          },
          asio::detached);
    }
    io.run();
    io.restart();
  }
  benchmark::DoNotOptimize(done);
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_QueryAsCoroutine);

}  // namespace
