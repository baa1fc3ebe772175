#pragma once
// Run two coroutines side by side on the current executor and wait for both.
// Unlike Asio's awaitable operators this installs no cancellation handlers: the relay and
// body pumps end by closing their sockets, never by cancellation.
#include <exception>
#include <memory>

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

namespace vibepit::proxy {

namespace detail {
struct Join {
  explicit Join(const asio::any_io_executor& ex) : done_signal(ex) {
    done_signal.expires_at(asio::steady_timer::time_point::max());
  }
  asio::steady_timer done_signal;  // cancelled when the side task finishes
  bool done = false;
};

inline asio::awaitable<void> run_and_signal(asio::awaitable<void> op, std::shared_ptr<Join> join) {
  try {
    co_await std::move(op);
  } catch (...) {
    // A side task must still release its waiter; the pumps report errors by value.
  }
  join->done = true;
  join->done_signal.cancel();
}
}  // namespace detail

inline asio::awaitable<void> both(asio::awaitable<void> first, asio::awaitable<void> second) {
  auto ex = co_await asio::this_coro::executor;
  auto join = std::make_shared<detail::Join>(ex);
  asio::co_spawn(ex, detail::run_and_signal(std::move(second), join), asio::detached);
  co_await std::move(first);
  if (!join->done) {
    asio::error_code ignored;
    co_await join->done_signal.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
  }
}

}  // namespace vibepit::proxy
