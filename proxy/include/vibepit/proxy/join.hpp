#pragma once
// Run two coroutines side by side on the current executor and wait for both.
// Unlike Asio's awaitable operators this installs no cancellation handlers: the relay and
// body pumps end by closing their sockets, never by cancellation.
//
// Every tunnel runs one (its two pumps), so it costs little: `second` is spawned with a
// completion handler that resumes the waiting coroutine directly, from where `first` left
// it waiting, and the state they share lives in both()'s own frame. (A timer to wait on, in
// a shared_ptr, was a quarter of both()'s instructions.)
#include <exception>
#include <optional>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>

namespace vibepit::proxy {

namespace detail {

// What `second`'s completion and the coroutine waiting for it share, in both()'s frame.
struct Join {
  using Waiter = asio::async_result<asio::use_awaitable_t<>, void()>::handler_type;
  bool done = false;             // `second` has finished
  std::optional<Waiter> waiter;  // both(), suspended until then
};

// `second`'s completion handler. If it is destroyed uncalled (its io_context went away
// with `second` still waiting), the coroutine waiting on it goes with it: the waiter owns
// that coroutine's frames, both()'s own among them, and nothing else would free them.
class Resume {
 public:
  explicit Resume(Join& j) : join_(&j) {}
  Resume(Resume&& other) noexcept : join_(std::exchange(other.join_, nullptr)) {}
  Resume& operator=(Resume&&) = delete;
  ~Resume() {
    if (join_ && join_->waiter) {
      auto orphan = std::move(*join_->waiter);
      join_->waiter.reset();
    }  // `orphan` ends here, and both()'s frame (`join_` in it) with it
  }

  void operator()(const std::exception_ptr&) {  // a side task's errors: the pumps report by value
    Join* j = std::exchange(join_, nullptr);
    j->done = true;
    if (!j->waiter) return;  // `first` is still running: both() will see `done`
    auto w = std::move(*j->waiter);
    j->waiter.reset();
    std::move(w)();  // resumes both(), which may end, and its frame with `j`
  }

 private:
  Join* join_;
};

}  // namespace detail

inline asio::awaitable<void> both(asio::awaitable<void> first, asio::awaitable<void> second) {
  auto ex = co_await asio::this_coro::executor;
  detail::Join join;
  asio::co_spawn(ex, std::move(second), detail::Resume(join));
  // `join` must outlive `second`: whatever `first` throws waits until `second` is done.
  std::exception_ptr error;
  try {
    co_await std::move(first);
  } catch (...) {
    error = std::current_exception();
  }
  if (!join.done) {
    co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
        [&join](detail::Join::Waiter w) { join.waiter.emplace(std::move(w)); },
        asio::use_awaitable);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace vibepit::proxy
