// The UDP forwarder (dns/src/udp_upstream.hpp) against fake upstream servers on loopback,
// all on one io_context: which answers it takes for a query and which it drops, its IDs,
// its retry on the next server, and how queries end when nothing answers.
#include "udp_upstream.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/udp.hpp>

#include "dns_builder.hpp"

namespace vibepit::dns {
namespace {

using test::Bytes;
using test::Msg;
using udp = asio::ip::udp;
using namespace std::chrono_literals;

// What a query ended with.
struct Outcome {
  int calls = 0;
  UpstreamStatus status = UpstreamStatus::answer;
  Bytes answer;
};

void record(void* user, UpstreamStatus status, std::span<const std::uint8_t> answer) {
  auto* o = static_cast<Outcome*>(user);
  ++o->calls;
  o->status = status;
  o->answer.assign(answer.begin(), answer.end());
}

Bytes query(std::string_view name) {
  return Msg().header(0, kFlagRD, 1, 0, 0, 0).question(name, qtype::A).b;
}
constexpr std::size_t question_end(std::string_view name) {
  return kHeaderSize + name.size() + 2 + 4;  // labels and root, type, class
}

// A reply to `q` (as the upstream received it) with ID `id`, the question `name`, flags
// `flags`, and `marker` as the A record's last octet.
Bytes reply(std::uint16_t id, std::string_view name, std::uint8_t marker,
            std::uint16_t flags = kFlagQR | kFlagRD | kFlagRA, std::uint16_t qd = 1) {
  Msg m;
  m.header(id, flags, qd, 1, 0, 0);
  if (qd) m.question(name, qtype::A);
  m.name(name).u16(qtype::A).u16(kClassIN).u32(60).u16(4).u8(198).u8(51).u8(100).u8(marker);
  return m.b;
}

// An upstream server on 127.0.0.1 that records what it receives and answers only when told.
struct FakeServer {
  explicit FakeServer(asio::io_context& io)
      : sock(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    read();
  }
  void read() {
    sock.async_receive_from(
        asio::buffer(buf), from, [this](const asio::error_code& ec, std::size_t n) {
          if (ec) return;
          got.emplace_back(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
          peers.push_back(from);
          read();
        });
  }
  void send(const Bytes& b, std::size_t to = 0) { sock.send_to(asio::buffer(b), peers.at(to)); }
  std::uint16_t id(std::size_t i) const {
    return static_cast<std::uint16_t>(got.at(i)[0] << 8 | got.at(i)[1]);
  }
  config::Endpoint endpoint() const {
    config::Endpoint e;
    e.addr.bytes = {127, 0, 0, 1};
    e.port = sock.local_endpoint().port();
    return e;
  }
  udp::socket sock;
  std::array<std::uint8_t, 4096> buf{};
  udp::endpoint from;
  std::vector<Bytes> got;
  std::vector<udp::endpoint> peers;
};

// Runs the loop until `done` holds or `limit` passes; true when it held.
template <class Pred>
bool run_until(asio::io_context& io, Pred done, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    io.restart();
    io.run_for(5ms);
  }
  return true;
}

TEST(UdpUpstream, TheAnswerWithTheIdSentReachesTheQuery) {
  asio::io_context io;
  FakeServer up(io);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 5000ms}, &record);
  Outcome o;
  const auto q = query("a.test");
  ASSERT_TRUE(fwd.send(q, question_end("a.test"), &o));
  ASSERT_TRUE(run_until(io, [&] { return up.got.size() == 1; }));
  // The question left as given; the ID is ours.
  EXPECT_TRUE(std::equal(q.begin() + 2, q.end(), up.got[0].begin() + 2));
  up.send(reply(up.id(0), "a.test", 7));
  ASSERT_TRUE(run_until(io, [&] { return o.calls > 0; }));
  EXPECT_EQ(o.calls, 1);
  EXPECT_EQ(o.status, UpstreamStatus::answer);
  EXPECT_EQ(o.answer, reply(up.id(0), "a.test", 7));
  EXPECT_EQ(fwd.pending(), 0u);
}

// The worker holds the forwarder across a batch of client datagrams and flushes at its end:
// the batch leaves then, and no posted flush is left in the loop's queue (one would make
// Asio's loop call epoll_wait() once more before it sleeps). The flush ends the hold.
TEST(UdpUpstream, AHeldBatchLeavesAtTheFlushWithNothingPostedBehindIt) {
  asio::io_context io, server_io;  // the server apart, so that io's queue is the forwarder's
  FakeServer up(server_io);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 5000ms}, &record);
  Outcome a, b, c;
  fwd.hold();
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &a));
  ASSERT_TRUE(fwd.send(query("b.test"), question_end("b.test"), &b));
  fwd.flush();
  EXPECT_EQ(io.poll(), 0u) << "a flush was posted behind the held batch";
  ASSERT_TRUE(run_until(server_io, [&] { return up.got.size() == 2; }));
  // Not held: the query leaves by itself, through a posted flush.
  ASSERT_TRUE(fwd.send(query("c.test"), question_end("c.test"), &c));
  io.restart();
  EXPECT_EQ(io.poll(), 1u);
  ASSERT_TRUE(run_until(server_io, [&] { return up.got.size() == 3; }));
  EXPECT_EQ(fwd.pending(), 3u);
}

TEST(UdpUpstream, AnswersThatAreNotForTheQueryAreDropped) {
  asio::io_context io;
  FakeServer up(io);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 5000ms}, &record);
  Outcome o;
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &o));
  ASSERT_TRUE(run_until(io, [&] { return up.got.size() == 1; }));
  const std::uint16_t id = up.id(0);
  up.send(reply(static_cast<std::uint16_t>(id ^ 1), "a.test", 1));  // another ID
  up.send(reply(id, "b.test", 2));                                  // another name
  up.send(reply(id, "a.test", 3, kFlagRD));                         // not a response
  up.send(reply(id, "a.test", 4, kFlagQR, 0));                      // no question
  const Bytes whole = reply(id, "a.test", 5);
  up.send(Bytes(whole.begin(), whole.begin() + 11));  // a runt
  Msg other_type;
  other_type.header(id, kFlagQR, 1, 0, 0, 0).question("a.test", qtype::AAAA);
  up.send(other_type.b);
  up.send(reply(id, "A.TeSt", 6));  // the name in other case: ours (RFC 5452 0x20)
  ASSERT_TRUE(run_until(io, [&] { return o.calls > 0; }));
  // The server's sends are already queued (loopback delivers as it sends): once nothing is
  // ready, every later datagram has been read, and any would have been a second completion.
  io.restart();
  while (io.poll() > 0) {
  }
  EXPECT_EQ(o.calls, 1);
  EXPECT_EQ(o.status, UpstreamStatus::answer);
  EXPECT_EQ(o.answer.back(), 6);
}

TEST(UdpUpstream, IdsAreDrawnAtRandomAndNeverShared) {
  asio::io_context io;
  FakeServer up(io);
  // In rounds the fake server's receive buffer holds: loopback drops what overflows it.
  std::vector<Outcome> outcomes(2000);
  constexpr std::size_t kRound = 200;
  {
    UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 30000ms}, &record);
    for (std::size_t i = 0; i < outcomes.size(); i += kRound) {
      for (std::size_t j = i; j < i + kRound; ++j) {
        ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &outcomes[j]));
      }
      ASSERT_TRUE(run_until(io, [&] { return up.got.size() == i + kRound; }));
    }
    EXPECT_EQ(fwd.pending(), outcomes.size());
    std::set<std::uint16_t> ids;
    int sequential = 0;
    for (std::size_t i = 0; i < up.got.size(); ++i) {
      ids.insert(up.id(i));
      if (i && up.id(i) == static_cast<std::uint16_t>(up.id(i - 1) + 1)) ++sequential;
    }
    EXPECT_EQ(ids.size(), outcomes.size()) << "two queries in flight shared an ID";
    EXPECT_LT(sequential, 5) << "IDs follow each other: guessable";
  }
  // Destroyed with every query pending: each ends once, as stopped.
  for (const auto& o : outcomes) {
    ASSERT_EQ(o.calls, 1);
    EXPECT_EQ(o.status, UpstreamStatus::stopped);
  }
}

TEST(UdpUpstream, ATryThatTimesOutGoesToTheNextServerWithANewId) {
  asio::io_context io;
  FakeServer first(io), second(io);
  UdpUpstream fwd(io, {first.endpoint(), second.endpoint()}, {.timeout = 600ms}, &record);
  Outcome o;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &o));
  ASSERT_TRUE(run_until(io, [&] { return second.got.size() == 1; }));
  const auto retried = std::chrono::steady_clock::now() - start;
  EXPECT_GE(retried, 200ms) << "the first try has a third of the budget";
  ASSERT_EQ(first.got.size(), 1u);
  // The first server's late answer is no longer taken; the second's is.
  first.send(reply(first.id(0), "a.test", 1));
  second.send(reply(second.id(0), "a.test", 2));
  ASSERT_TRUE(run_until(io, [&] { return o.calls > 0; }));
  EXPECT_EQ(o.status, UpstreamStatus::answer);
  EXPECT_EQ(o.answer.back(), 2);
}

TEST(UdpUpstream, NoAnswerEndsAsATimeoutWhenTheBudgetRunsOut) {
  asio::io_context io;
  FakeServer up(io);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 450ms}, &record);
  Outcome o;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &o));
  ASSERT_TRUE(run_until(io, [&] { return o.calls > 0; }));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(o.status, UpstreamStatus::timeout);
  EXPECT_GE(took, 450ms);
  EXPECT_EQ(up.got.size(), 2u) << "one try and one retry (the only server again)";
  EXPECT_NE(up.id(0), up.id(1));
  EXPECT_EQ(fwd.pending(), 0u);
}

TEST(UdpUpstream, ARefusingServerEndsTheQueryAtOnce) {
  asio::io_context io;
  config::Endpoint closed;
  {
    FakeServer gone(io);  // its port is closed when it goes: loopback answers ICMP unreachable
    closed = gone.endpoint();
  }
  UdpUpstream fwd(io, {closed}, {.timeout = 60000ms}, &record);
  Outcome o;
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &o));
  ASSERT_TRUE(run_until(
      io, [&] { return o.calls > 0; }, 10000ms))
      << "waited for the timeout";
  EXPECT_EQ(o.status, UpstreamStatus::refused);
}

TEST(UdpUpstream, AnErrorReportedWhileSendingEndsEveryTryOnceEach) {
  asio::io_context io;
  config::Endpoint closed;
  {
    FakeServer gone(io);
    closed = gone.endpoint();
  }
  UdpUpstream fwd(io, {closed}, {.timeout = 60000ms}, &record);
  Outcome a, b;
  ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &a));
  fwd.flush();
  // The port-unreachable comes back and waits on the socket; the next send reports it.
  std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(fwd.send(query("b.test"), question_end("b.test"), &b));
  fwd.flush();
  ASSERT_TRUE(run_until(
      io, [&] { return a.calls > 0 && b.calls > 0; }, 10000ms));
  // A third query's end comes after any second report of the first two.
  Outcome c;
  ASSERT_TRUE(fwd.send(query("c.test"), question_end("c.test"), &c));
  fwd.flush();
  ASSERT_TRUE(run_until(
      io, [&] { return c.calls > 0; }, 10000ms));
  EXPECT_EQ(a.calls, 1);
  EXPECT_EQ(b.calls, 1);
  EXPECT_EQ(a.status, UpstreamStatus::refused);
  EXPECT_EQ(b.status, UpstreamStatus::refused);
  EXPECT_EQ(fwd.pending(), 0u);
}

TEST(UdpUpstream, ManyQueriesInFlightSpreadOverMoreSockets) {
  asio::io_context io;
  FakeServer up(io);
  std::vector<Outcome> outcomes(UdpUpstream::kSocketLoad + 100);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 30000ms, .max_pending = 2 * outcomes.size()},
                  &record);
  // A full first socket; loopback drops most of these, and the server reads what it kept.
  for (std::size_t i = 0; i < UdpUpstream::kSocketLoad; ++i) {
    ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &outcomes[i]));
  }
  ASSERT_TRUE(run_until(io, [&] { return !up.got.empty(); }));
  // Loopback delivers as it sends: what was kept is already queued, and the server has read
  // it all once nothing is ready.
  io.restart();
  while (io.poll() > 0) {
  }
  std::set<std::uint16_t> first;
  for (auto& p : up.peers) first.insert(p.port());
  const std::size_t seen = up.peers.size();
  for (std::size_t i = UdpUpstream::kSocketLoad; i < outcomes.size(); ++i) {
    ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &outcomes[i]));
  }
  EXPECT_EQ(fwd.pending(), outcomes.size());
  ASSERT_TRUE(run_until(io, [&] { return up.peers.size() == seen + 100; }));
  for (std::size_t i = seen; i < up.peers.size(); ++i) {
    EXPECT_EQ(first.count(up.peers[i].port()), 0u) << "the full socket took more";
  }
}

// Every query up to the socket's load gets an ID, however unlucky the draws near the end
// (eight random draws alone failed about one run in thirty here); the next one is refused.
TEST(UdpUpstream, WithOneSocketAtItsLoadSendRefuses) {
  asio::io_context io;
  FakeServer up(io);
  std::vector<Outcome> outcomes(UdpUpstream::kSocketLoad + 1);
  UdpUpstream fwd(io, {up.endpoint()}, {.timeout = 30000ms, .max_pending = 1}, &record);
  for (std::size_t i = 0; i < UdpUpstream::kSocketLoad; ++i) {
    ASSERT_TRUE(fwd.send(query("a.test"), question_end("a.test"), &outcomes[i]));
  }
  EXPECT_FALSE(fwd.send(query("a.test"), question_end("a.test"), &outcomes.back()));
  EXPECT_EQ(outcomes.back().calls, 0);
}

}  // namespace
}  // namespace vibepit::dns
