// The relay between two real loopback TCP connections, with splice and with copies.
#include "vibepit/proxy/relay.hpp"

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/connect.hpp>
#include <asio/detached.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <thread>

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;

// A connected pair of sockets on 127.0.0.1.
std::pair<tcp::socket, tcp::socket> socket_pair(asio::io_context& io) {
  tcp::acceptor acc(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket a(io), b(io);
  a.connect(acc.local_endpoint());
  acc.accept(b);
  return {std::move(a), std::move(b)};
}

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

// The relay under test on `io`, with no activity callback; `done` (if given) is set when it
// returns.
void spawn_relay(asio::io_context& io, tcp::socket& client_side, tcp::socket& upstream_side,
                 bool use_splice, RelayStats& stats, bool* done = nullptr) {
  asio::co_spawn(
      io,
      [&, use_splice, done]() -> asio::awaitable<void> {
        co_await relay(
            client_side, upstream_side, use_splice, [] {}, stats);
        if (done) *done = true;
      },
      asio::detached);
}

class Relay : public ::testing::TestWithParam<bool> {};

TEST_P(Relay, CarriesBothDirectionsIntactAndPropagatesHalfClose) {
  asio::io_context io;
  auto [client_app, client_side] = socket_pair(io);    // app <-> proxy's client socket
  auto [upstream_side, server_app] = socket_pair(io);  // proxy's upstream socket <-> server

  const auto up = pattern(3 * 1024 * 1024 + 17, 1);
  const auto down = pattern(2 * 1024 * 1024 + 5, 2);
  RelayStats stats;
  int activity = 0;
  bool relay_done = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await relay(
            client_side, upstream_side, GetParam(), [&] { ++activity; }, stats);
        relay_done = true;
      },
      asio::detached);
  std::thread io_thread([&] { io.run_for(std::chrono::seconds(30)); });

  // Each app writes everything, then half-closes, then reads until EOF.
  std::string got_up, got_down;
  std::thread server([&] {
    asio::error_code ec;
    asio::write(server_app, asio::buffer(down), ec);
    server_app.shutdown(tcp::socket::shutdown_send, ec);
    asio::read(server_app, asio::dynamic_buffer(got_up), ec);
  });
  asio::error_code ec;
  asio::write(client_app, asio::buffer(up), ec);
  client_app.shutdown(tcp::socket::shutdown_send, ec);
  asio::read(client_app, asio::dynamic_buffer(got_down), ec);
  EXPECT_EQ(ec, asio::error::eof);  // the server's FIN reached the client
  server.join();
  io_thread.join();

  EXPECT_TRUE(relay_done);
  EXPECT_EQ(got_up.size(), up.size());
  EXPECT_TRUE(got_up == up);
  EXPECT_TRUE(got_down == down);
  EXPECT_EQ(stats.up, up.size());
  EXPECT_EQ(stats.down, down.size());
  EXPECT_EQ(stats.spliced, GetParam());
  EXPECT_GT(activity, 0);
}

TEST_P(Relay, ResetOnOneSideClosesTheOther) {
  asio::io_context io;
  auto [client_app, client_side] = socket_pair(io);
  auto [upstream_side, server_app] = socket_pair(io);
  RelayStats stats;
  bool relay_done = false;
  spawn_relay(io, client_side, upstream_side, GetParam(), stats, &relay_done);
  std::thread io_thread([&] { io.run_for(std::chrono::seconds(10)); });
  // An abortive close (RST) of the server side.
  server_app.set_option(asio::socket_base::linger(true, 0));
  server_app.close();
  std::string rest;
  asio::error_code ec;
  asio::read(client_app, asio::dynamic_buffer(rest), ec);
  EXPECT_TRUE(ec) << "client side must see the tunnel end";
  client_app.close();
  io_thread.join();
  EXPECT_TRUE(relay_done);
}

TEST_P(Relay, BytesBufferedBeforeTheRelayStartsAreForwardedWithoutMoreTraffic) {
  // Data that arrived (and that the reactor already reported) before the relay started must
  // still be forwarded, and a burst larger than one chunk must not wait for more traffic.
  asio::io_context io;
  auto [client_app, client_side] = socket_pair(io);
  auto [upstream_side, server_app] = socket_pair(io);
  const auto burst = pattern(200 * 1024, 3);
  asio::write(client_app, asio::buffer(burst));  // fits in loopback buffers; no close
  // Let the reactor see (and consume) the readiness edge while nothing waits for it, as
  // happens when a client sends right after our "200" while the session is busy.
  {
    asio::steady_timer busy(io, std::chrono::milliseconds(200));
    busy.async_wait([](const asio::error_code&) {});
    io.run_for(std::chrono::milliseconds(50));  // epoll_wait runs and reports the edge
    busy.cancel();
    io.run();
    io.restart();
  }
  RelayStats stats;
  spawn_relay(io, client_side, upstream_side, GetParam(), stats);
  std::string got(burst.size(), '\0');
  std::thread reader([&] {
    timeval tv{5, 0};  // a stall fails the test instead of hanging it
    setsockopt(server_app.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    asio::error_code ec;
    asio::read(server_app, asio::buffer(got), ec);
    EXPECT_FALSE(ec) << ec.message();
    client_app.close();
    server_app.close();
  });
  io.run_for(std::chrono::seconds(10));
  reader.join();
  EXPECT_TRUE(got == burst);
}

TEST_P(Relay, ASlowReceiverGetsEverythingAndLaterBytesStillFlow) {
  // The server sends far more than the buffers hold while the client reads slowly, so the
  // relay's writes to the client block and it stops listening to the server meanwhile
  // (runtime::ReadInterest). Everything must arrive in order; and once all is read, bytes the
  // server sends later, without closing, must still be forwarded: listening resumed.
  asio::io_context io;
  auto [client_app, client_side] = socket_pair(io);
  auto [upstream_side, server_app] = socket_pair(io);
  const auto bulk = pattern(8 * 1024 * 1024 + 11, 4);
  const auto later = pattern(100, 5);
  RelayStats stats;
  spawn_relay(io, client_side, upstream_side, GetParam(), stats);
  std::thread io_thread([&] { io.run_for(std::chrono::seconds(60)); });
  std::thread server([&] {
    asio::error_code ec;
    asio::write(server_app, asio::buffer(bulk), ec);
    EXPECT_FALSE(ec) << ec.message();
  });
  // Plain recv() with a receive timeout: a stall fails the test instead of hanging it (Asio's
  // blocking read would poll on after the timeout).
  timeval tv{5, 0};
  setsockopt(client_app.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto read_up_to = [&](char* to, std::size_t n) {
    const ssize_t r = ::recv(client_app.native_handle(), to, n, 0);
    return r > 0 ? static_cast<std::size_t>(r) : 0;
  };
  std::string got(bulk.size(), '\0');
  std::size_t have = 0;
  for (std::size_t r = 1; have < got.size() && r > 0;) {
    r = read_up_to(got.data() + have, std::min<std::size_t>(64 * 1024, got.size() - have));
    have += r;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  asio::error_code ec;
  if (have < got.size()) {  // stalled: unblock the server's write and the loop, then fail
    server_app.shutdown(tcp::socket::shutdown_both, ec);
    server.join();
    io.stop();
    io_thread.join();
    FAIL() << "the relay stalled after " << have << " of " << bulk.size() << " bytes";
  }
  server.join();
  EXPECT_TRUE(got == bulk);
  asio::write(server_app, asio::buffer(later), ec);
  std::string got_later(later.size(), '\0');
  std::size_t late = 0;
  for (std::size_t r = 1; late < later.size() && r > 0;) {
    r = read_up_to(got_later.data() + late, later.size() - late);
    late += r;
  }
  EXPECT_EQ(late, later.size()) << "bytes sent after the slow spell did not arrive";
  EXPECT_TRUE(got_later == later);
  client_app.close();
  server_app.close();
  io_thread.join();
  EXPECT_EQ(stats.spliced, GetParam());  // known once the relay has ended
}

// A conversation of short turns (each a short read for the pump), whose last turn each way
// carries its FIN with its bytes: the relay must see each FIN although it raised no edge of
// its own (the pumps skip the re-arm after a short read only when the reactor's report
// vouches for it, runtime::peer_close). The apps' reads are bounded: a lost FIN fails, not
// hangs.
TEST_P(Relay, ShortTurnsEndingInBytesWithTheirFinEndTheTunnel) {
  asio::io_context io;
  auto [client_app, client_side] = socket_pair(io);
  auto [upstream_side, server_app] = socket_pair(io);
  RelayStats stats;
  bool relay_done = false;
  spawn_relay(io, client_side, upstream_side, GetParam(), stats, &relay_done);
  std::thread io_thread([&] { io.run_for(std::chrono::seconds(20)); });
  const timeval bound{5, 0};
  for (auto* s : {&client_app, &server_app}) {
    ASSERT_EQ(::setsockopt(s->native_handle(), SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound), 0);
  }
  // Plain recv() (which SO_RCVTIMEO bounds; Asio's blocking reads would poll on).
  // Exactly `n` bytes of one turn.
  auto take = [](tcp::socket& s, std::size_t n) {
    std::string got;
    char buf[64];
    while (got.size() < n) {
      ssize_t r = ::recv(s.native_handle(), buf, std::min(sizeof buf, n - got.size()), 0);
      if (r <= 0) {
        ADD_FAILURE() << "recv: " << r << " " << std::strerror(errno);
        break;
      }
      got.append(buf, static_cast<std::size_t>(r));
    }
    return got;
  };
  // Then EOF, not a timeout.
  auto expect_eof = [](tcp::socket& s, const char* who) {
    char c;
    ssize_t r = ::recv(s.native_handle(), &c, 1, 0);
    EXPECT_EQ(r, 0) << who << ": no EOF (" << std::strerror(errno) << ")";
  };
  for (int turn = 0; turn < 20; ++turn) {
    const std::string q = "q" + std::to_string(turn), a = "answer " + std::to_string(turn);
    asio::write(client_app, asio::buffer(q));
    EXPECT_EQ(take(server_app, q.size()), q);
    asio::write(server_app, asio::buffer(a));
    EXPECT_EQ(take(client_app, a.size()), a);
  }
  // The client's last bytes and its FIN back to back, then the server's.
  asio::write(client_app, asio::buffer("bye", 3));
  client_app.shutdown(tcp::socket::shutdown_send);
  EXPECT_EQ(take(server_app, 3), "bye");
  expect_eof(server_app, "server");
  asio::write(server_app, asio::buffer("end", 3));
  server_app.shutdown(tcp::socket::shutdown_send);
  EXPECT_EQ(take(client_app, 3), "end");
  expect_eof(client_app, "client");
  io_thread.join();
  EXPECT_TRUE(relay_done);
  EXPECT_EQ(stats.up, 20 * 2 + 10 * 1 + 3);  // q0..q9 are 2 bytes, q10..q19 are 3
  EXPECT_EQ(stats.down, 20 * 8 + 10 * 1 + 3);
}

INSTANTIATE_TEST_SUITE_P(SpliceAndCopy, Relay, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "splice" : "copy"; });

}  // namespace
}  // namespace vibepit::proxy
