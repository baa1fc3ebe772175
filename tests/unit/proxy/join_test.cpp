// both(): two coroutines side by side, the caller resumed once both are done, whichever
// ends first; what the first throws comes out after the second is done; and a loop that
// goes away while one waits frees the waiting caller's frames (the handler that would have
// resumed it owns them then).
#include "vibepit/proxy/join.hpp"

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace vibepit::proxy {
namespace {

using namespace std::chrono_literals;

// A coroutine that waits `d` on a timer of its own, then notes `name` in `order`.
asio::awaitable<void> after(std::chrono::milliseconds d, std::string name,
                            std::vector<std::string>& order) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  asio::error_code ec;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  order.push_back(std::move(name));
}

asio::awaitable<void> throws_after(std::chrono::milliseconds d, std::vector<std::string>& order) {
  co_await after(d, "thrower", order);
  throw std::runtime_error("first failed");
}

// Counts its own destruction: in a frame, it says whether that frame was freed.
struct Sentinel {
  std::shared_ptr<int> destroyed;
  ~Sentinel() {
    if (destroyed) ++*destroyed;
  }
};

TEST(Both, ResumesTheCallerOnceBothAreDoneWhicheverEndsFirst) {
  for (bool first_is_quicker : {true, false}) {
    asio::io_context io;
    std::vector<std::string> order;
    bool returned = false;
    const auto quick = 5ms, slow = 30ms;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          co_await both(after(first_is_quicker ? quick : slow, "first", order),
                        after(first_is_quicker ? slow : quick, "second", order));
          order.push_back("both");
          returned = true;
        },
        asio::detached);
    io.run_for(5s);
    ASSERT_TRUE(returned) << "first_is_quicker=" << first_is_quicker;
    const std::vector<std::string> want = first_is_quicker
                                              ? std::vector<std::string>{"first", "second", "both"}
                                              : std::vector<std::string>{"second", "first", "both"};
    EXPECT_EQ(order, want);
  }
}

TEST(Both, WhatTheFirstThrowsComesOutAfterTheSecondIsDone) {
  asio::io_context io;
  std::vector<std::string> order;
  std::string caught;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await both(throws_after(5ms, order), after(30ms, "second", order));
        } catch (const std::exception& e) {
          caught = e.what();
          order.push_back("caught");
        }
      },
      asio::detached);
  io.run_for(5s);
  EXPECT_EQ(caught, "first failed");
  EXPECT_EQ(order, (std::vector<std::string>{"thrower", "second", "caught"}));
}

TEST(Both, ALoopThatGoesAwayWhileTheSecondWaitsFreesTheWaitingCaller) {
  auto destroyed = std::make_shared<int>(0);
  std::vector<std::string> order;
  {
    asio::io_context io;
    asio::co_spawn(
        io,
        [&, destroyed]() -> asio::awaitable<void> {
          Sentinel s{destroyed};
          // The first ends at once; the second waits far longer than the loop runs.
          co_await both(after(0ms, "first", order), after(1h, "second", order));
          order.push_back("both");  // never: the loop goes away first
        },
        asio::detached);
    // Until the first has ended and nothing else is ready: all that is left is the
    // second's timer wait.
    for (int i = 0; i < 1000 && order.empty(); ++i) io.run_one_for(10ms);
    while (io.poll() > 0) {
    }
    ASSERT_EQ(order, std::vector<std::string>{"first"});
    EXPECT_EQ(*destroyed, 0) << "the caller is still waiting";
  }  // the loop is destroyed with the second coroutine's timer wait pending
  EXPECT_EQ(*destroyed, 1) << "the waiting caller's frame was not freed";
  EXPECT_EQ(order, std::vector<std::string>{"first"});
}

}  // namespace
}  // namespace vibepit::proxy
