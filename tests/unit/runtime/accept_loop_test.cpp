// runtime/accept_loop.hpp: listen_tcp()'s options and accept_fresh(). With
// TCP_DEFER_ACCEPT a client is not handed to accept() until its first bytes arrive, and
// then they are there to read; a silent client is handed over once the kernel stops
// deferring. Real loopback sockets.
#include "vibepit/runtime/accept_loop.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <optional>
#include <thread>

namespace vibepit::runtime {
namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct Listening {
  asio::io_context io{1};
  tcp::socket listener;
  tcp::endpoint at;

  explicit Listening(ListenOptions options)
      : listener(listen_tcp(io, {asio::ip::make_address("127.0.0.1"), 0}, options)),
        at(listener.local_endpoint()) {}

  // A client whose handshake has completed (a blocking connect).
  tcp::socket connect() {
    tcp::socket c(io);
    c.connect(at);
    return c;
  }
  // One accept_fresh(): the accepted socket, or nothing when no client is ready.
  std::optional<tcp::socket> try_accept() {
    tcp::socket s(io);
    tcp::endpoint peer;
    asio::error_code ec;
    accept_fresh(listener, s, peer, ec);
    if (ec == asio::error::would_block) return std::nullopt;
    EXPECT_FALSE(ec) << ec.message();
    if (ec) return std::nullopt;
    return s;
  }
  // accept_fresh() every 5 ms until a client is ready or `limit` passes.
  std::optional<tcp::socket> accept_within(std::chrono::milliseconds limit) {
    const auto until = Clock::now() + limit;
    for (;;) {
      if (auto s = try_accept()) return s;
      if (Clock::now() >= until) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

int defer_accept_of(tcp::socket& s) {
  int v = -1;
  socklen_t len = sizeof v;
  EXPECT_EQ(::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &len), 0);
  return v;
}

TEST(ListenTcp, WithoutDeferralAClientIsAcceptedOnceConnected) {
  Listening l({});
  EXPECT_EQ(defer_accept_of(l.listener), 0);
  auto c = l.connect();
  auto s = l.accept_within(std::chrono::milliseconds(2000));
  ASSERT_TRUE(s.has_value()) << "a connected client was not accepted";
  EXPECT_EQ(s->remote_endpoint(), c.local_endpoint());
}

TEST(ListenTcp, ADeferredClientIsAcceptedWithItsFirstBytesAlreadyThere) {
  Listening l({.defer_accept_s = 1});
  EXPECT_GT(defer_accept_of(l.listener), 0);
  auto c = l.connect();
  // The handshake is done on the client's side; the listener still has nothing to give.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(l.try_accept().has_value()) << "a silent client was accepted at once";
  ASSERT_EQ(::send(c.native_handle(), "CONNECT", 7, MSG_NOSIGNAL), 7);
  auto s = l.accept_within(std::chrono::milliseconds(2000));
  ASSERT_TRUE(s.has_value()) << "a client that sent was not accepted";
  char buf[16];
  // Non-blocking: the bytes are there the moment the client is accepted.
  EXPECT_EQ(::recv(s->native_handle(), buf, sizeof buf, MSG_DONTWAIT), 7);
}

TEST(ListenTcp, ASilentDeferredClientIsAcceptedWhenTheKernelStopsDeferring) {
  Listening l({.defer_accept_s = 1});
  const auto t0 = Clock::now();
  auto c = l.connect();
  // The kernel retransmits its SYN-ACK after 1 s and accepts on the client's answer; allow
  // for the next retransmission (3 s more) on a loaded machine.
  auto s = l.accept_within(std::chrono::milliseconds(6000));
  ASSERT_TRUE(s.has_value()) << "a silent client was never accepted";
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(500)) << "accepted without deferral";
  EXPECT_EQ(s->remote_endpoint(), c.local_endpoint());
}

}  // namespace
}  // namespace vibepit::runtime
