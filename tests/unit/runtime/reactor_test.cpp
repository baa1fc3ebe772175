// runtime/reactor.hpp. async_wait_edge(): a wait after EAGAIN that costs no system call must still
// see every edge, including one that came while nothing waited, must not complete again for an edge
// it already reported, and must end when the socket closes. Real loopback sockets.
#include "vibepit/runtime/reactor.hpp"

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/udp.hpp>

namespace vibepit::runtime {
namespace {

using asio::ip::tcp;
using asio::ip::udp;

struct Pair {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  tcp::socket near{io};  // the one waited on
  tcp::socket far{io};   // the peer, written to and read from directly

  Pair() {
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    far.connect(a.local_endpoint());
    a.accept(near);
    near.non_blocking(true);
    far.non_blocking(true);
    // A new socket has an edge on record from its registration: the first wait completes
    // at once, as it must (nothing says the socket is empty). Consume it.
    auto first = wait(Edge::read);
    io.poll();
    EXPECT_TRUE(first->has_value()) << "a new socket's first wait did not complete at once";
  }

  // Let the reactor look at the descriptors (a non-blocking epoll_wait) and run what is
  // ready, after giving the loopback a moment to deliver.
  void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int i = 0; i < 3; ++i) io.poll();
  }

  // Read `s` until EAGAIN; the bytes read.
  static std::size_t drain(tcp::socket& s) {
    char buf[65536];
    std::size_t total = 0;
    for (;;) {
      ssize_t n = ::recv(s.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        total += static_cast<std::size_t>(n);
        continue;
      }
      EXPECT_TRUE(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) << "n=" << n;
      return total;
    }
  }

  void put(tcp::socket& s, std::size_t n) {
    std::vector<char> bytes(n, 'x');
    ASSERT_EQ(::send(s.native_handle(), bytes.data(), n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
  }

  // One round of edge-triggered reading: wait, `n` bytes arrive, the wait completes and
  // `near` is read to EAGAIN.
  void wait_and_read(std::size_t n) {
    auto done = wait(Edge::read);
    put(far, n);
    settle();
    ASSERT_TRUE(done->has_value());
    EXPECT_FALSE(done->value());
    EXPECT_EQ(drain(near), n);
  }

  // Start a wait on `near`; the result lands in the returned slot when it completes.
  std::shared_ptr<std::optional<asio::error_code>> wait(Edge edge) {
    auto done = std::make_shared<std::optional<asio::error_code>>();
    async_wait_edge(near, edge, [done](const asio::error_code& ec) { *done = ec; });
    return done;
  }
  std::shared_ptr<std::optional<asio::error_code>> wait_rearmed(Edge edge) {
    auto done = std::make_shared<std::optional<asio::error_code>>();
    async_wait_rearmed(near, edge, [done](const asio::error_code& ec) { *done = ec; });
    return done;
  }
  // A re-arming wait on the drained `near`, completed by `n` bytes from `far` (and its FIN,
  // with `fin`, sent right after them).
  void rearmed_wait_for(std::size_t n, bool fin = false) {
    drain(near);
    auto done = wait_rearmed(Edge::read);
    put(far, n);
    if (fin) far.shutdown(tcp::socket::shutdown_send);
    settle();
    ASSERT_TRUE(done->has_value());
    EXPECT_FALSE(done->value());
  }
  // One recv() on `near`: the byte count, 0 at EOF, -1 with EAGAIN.
  ssize_t read_once() {
    char buf[4096];
    ssize_t n = ::recv(near.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << std::strerror(errno);
    }
    return n;
  }
};

TEST(EdgeWait, CompletesWhenBytesArriveAfterEagain) {
  Pair p;
  Pair::drain(p.near);
  auto done = p.wait(Edge::read);
  p.settle();
  EXPECT_FALSE(done->has_value()) << "completed with nothing to read";
  p.put(p.far, 100);
  p.settle();
  ASSERT_TRUE(done->has_value());
  EXPECT_FALSE(done->value());
  EXPECT_EQ(Pair::drain(p.near), 100u);
  p.wait_and_read(7);  // and again
}

// The case a re-arm exists for: the reactor saw the bytes arrive while no operation was
// waiting. A wait started afterwards must complete at once, with no new edge to come.
TEST(EdgeWait, AnEdgeThatCameWhileNothingWaitedCompletesTheNextWaitAtOnce) {
  Pair p;
  Pair::drain(p.near);
  p.wait_and_read(10);
  // Bytes arrive and the reactor reports them while nobody waits.
  p.put(p.far, 20);
  p.settle();
  auto second = p.wait(Edge::read);
  p.settle();
  ASSERT_TRUE(second->has_value()) << "the wait missed an edge the reactor had already seen";
  EXPECT_FALSE(second->value());
  EXPECT_EQ(Pair::drain(p.near), 20u);
}

// A completed wait consumes its edge: after the bytes are read to EAGAIN, the next wait
// sleeps. (Were the edge not consumed, every wait would complete at once, and a pump would
// spin.)
TEST(EdgeWait, AReportedEdgeIsConsumed) {
  Pair p;
  Pair::drain(p.near);
  p.wait_and_read(10);
  auto second = p.wait(Edge::read);
  p.settle();
  EXPECT_FALSE(second->has_value()) << "a wait completed for an edge already reported";
  p.put(p.far, 5);
  p.settle();
  EXPECT_TRUE(second->has_value());
}

TEST(EdgeWait, TheFarEndClosingCompletesTheWait) {
  Pair p;
  Pair::drain(p.near);
  auto done = p.wait(Edge::read);
  p.settle();
  ASSERT_FALSE(done->has_value());
  p.far.shutdown(tcp::socket::shutdown_send);
  p.settle();
  ASSERT_TRUE(done->has_value());
  char c;
  EXPECT_EQ(::recv(p.near.native_handle(), &c, 1, MSG_DONTWAIT), 0) << "EOF expected";
}

TEST(EdgeWait, ClosingTheSocketAbortsTheWait) {
  Pair p;
  Pair::drain(p.near);
  auto done = p.wait(Edge::read);
  p.settle();
  ASSERT_FALSE(done->has_value());
  p.near.close();
  p.settle();
  ASSERT_TRUE(done->has_value());
  EXPECT_EQ(done->value(), asio::error::operation_aborted);
}

TEST(EdgeWait, AWaitOnAClosedSocketFails) {
  Pair p;
  p.near.close();
  auto done = p.wait(Edge::read);
  p.settle();
  ASSERT_TRUE(done->has_value());
  EXPECT_TRUE(done->value());
}

// Writing: fill the socket until EAGAIN, wait, and the wait completes once the peer has
// read enough to make room.
TEST(EdgeWait, AWriteWaitCompletesWhenThePeerMakesRoom) {
  Pair p;
  std::vector<char> chunk(65536, 'y');
  std::size_t queued = 0;
  for (;;) {
    ssize_t n =
        ::send(p.near.native_handle(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      ASSERT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
      break;
    }
    queued += static_cast<std::size_t>(n);
    ASSERT_LT(queued, 64u << 20) << "the socket never filled";
  }
  // The registration's edge on record for writing is consumed by a first wait.
  auto stale = p.wait(Edge::write);
  p.settle();
  ASSERT_TRUE(stale->has_value());
  ASSERT_LT(::send(p.near.native_handle(), chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL),
            0);
  auto done = p.wait(Edge::write);
  p.settle();
  EXPECT_FALSE(done->has_value()) << "completed while the socket was full";
  std::size_t read = 0;
  for (int i = 0; i < 200 && !done->has_value(); ++i) {
    read += Pair::drain(p.far);
    p.settle();
  }
  ASSERT_TRUE(done->has_value()) << "no write edge after the peer read " << read << " bytes";
  EXPECT_FALSE(done->value());
}

// ReadInterest: while reads are paused, bytes that arrive raise no edge, so a wait for reading
// sleeps through them (this is the wake-up saved); resuming reports them at once.
TEST(ReadInterest, PausedReadsDoNotCompleteAWaitAndResumingDoes) {
  Pair p;
  Pair::drain(p.near);
  ReadInterest reads(p.near);
  reads.pause();
  ASSERT_TRUE(reads.paused()) << "the registration was not changed";
  auto done = p.wait(Edge::read);
  p.put(p.far, 100);
  p.settle();
  EXPECT_FALSE(done->has_value()) << "bytes raised an edge while reads were paused";
  ASSERT_TRUE(reads.resume());
  EXPECT_FALSE(reads.paused());
  p.settle();
  ASSERT_TRUE(done->has_value()) << "resuming did not report the bytes that came meanwhile";
  EXPECT_FALSE(done->value());
  EXPECT_EQ(Pair::drain(p.near), 100u);
  p.wait_and_read(5);  // and reads are reported as before
}

// The relay's order: pause, read what came meanwhile without waiting, and resume only when a
// read says EAGAIN. Bytes that arrive after that read and before the resume were never reported
// (the reactor's memory of an edge was consumed before the pause): the resume must report them.
TEST(ReadInterest, BytesBetweenTheLastReadAndTheResumeAreNotLost) {
  Pair p;
  Pair::drain(p.near);
  p.wait_and_read(10);  // the edge on record is consumed
  ReadInterest reads(p.near);
  reads.pause();
  p.put(p.far, 40);
  p.settle();
  EXPECT_EQ(Pair::drain(p.near), 40u);  // read without waiting: no edge needed
  p.put(p.far, 30);
  p.settle();
  ASSERT_TRUE(reads.resume());
  auto done = p.wait(Edge::read);
  p.settle();
  ASSERT_TRUE(done->has_value()) << "30 bytes wait unreported after the resume";
  EXPECT_EQ(Pair::drain(p.near), 30u);
}

// Leaving the scope resumes: a ReadInterest that ends paused does not leave the socket deaf.
TEST(ReadInterest, TheDestructorResumes) {
  Pair p;
  Pair::drain(p.near);
  {
    ReadInterest reads(p.near);
    reads.pause();
    ASSERT_TRUE(reads.paused());
  }
  p.wait_and_read(12);
}

// A reset ends a wait even while reads are paused (EPOLLERR and EPOLLHUP stay registered), so a
// pump never sleeps through its connection's end.
TEST(ReadInterest, AResetEndsAWaitWhileReadsArePaused) {
  Pair p;
  Pair::drain(p.near);
  ReadInterest reads(p.near);
  reads.pause();
  ASSERT_TRUE(reads.paused());
  auto done = p.wait(Edge::read);
  p.settle();
  EXPECT_FALSE(done->has_value());
  linger l{1, 0};
  ASSERT_EQ(::setsockopt(p.far.native_handle(), SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
  p.far.close();
  p.settle();
  ASSERT_TRUE(done->has_value()) << "a reset went unreported while reads were paused";
}

// Waits for writing are untouched by a pause of reads.
TEST(ReadInterest, WriteWaitsStillComplete) {
  Pair p;
  ReadInterest reads(p.near);
  reads.pause();
  ASSERT_TRUE(reads.paused());
  auto done = p.wait(Edge::write);  // a new socket's write edge on record: at once
  p.settle();
  ASSERT_TRUE(done->has_value());
  EXPECT_FALSE(done->value());
}

// A closed socket cannot be paused, and says so.
TEST(ReadInterest, AClosedSocketIsNotPaused) {
  Pair p;
  p.near.close();
  ReadInterest reads(p.near);
  reads.pause();
  EXPECT_FALSE(reads.paused());
  EXPECT_TRUE(reads.resume());
}

// Datagrams: the DNS server's loop waits after a recvmmsg() that came back short.
TEST(EdgeWait, WorksOnDatagramSockets) {
  asio::io_context io{1};
  auto guard = asio::make_work_guard(io);
  udp::socket rx(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  udp::socket tx(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  rx.non_blocking(true);
  char c = 'q';
  std::optional<asio::error_code> done;
  async_wait_edge(rx, Edge::read, [&](const asio::error_code& ec) { done = ec; });
  // The socket is new: the reactor has an edge on record from its registration, so the
  // first wait completes at once and reading says EAGAIN.
  io.poll();
  ASSERT_TRUE(done.has_value());
  char buf[16];
  ASSERT_LT(::recv(rx.native_handle(), buf, sizeof buf, MSG_DONTWAIT), 0);
  done.reset();
  async_wait_edge(rx, Edge::read, [&](const asio::error_code& ec) { done = ec; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  io.poll();
  EXPECT_FALSE(done.has_value());
  tx.send_to(asio::buffer(&c, 1), rx.local_endpoint());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  io.poll();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(::recv(rx.native_handle(), buf, sizeof buf, MSG_DONTWAIT), 1);
}

// async_wait_rearmed(): bytes already there complete it (the re-arm reports them), and the
// edge it completes on is consumed, so the next edge wait sleeps until something new.
TEST(RearmedWait, BytesAlreadyThereCompleteItAndItsEdgeIsConsumed) {
  Pair p;
  Pair::drain(p.near);
  p.put(p.far, 3);
  p.settle();  // reported to a reactor with nothing waiting: an edge on record
  auto first = p.wait_rearmed(Edge::read);
  p.settle();
  ASSERT_TRUE(first->has_value()) << "the re-arm did not report the bytes already there";
  EXPECT_FALSE(first->value());
  EXPECT_EQ(p.read_once(), 3);  // a short read: the contract's end of this edge
  auto next = p.wait(Edge::read);
  p.settle();
  EXPECT_FALSE(next->has_value()) << "an edge wait completed for the edge already consumed";
  p.put(p.far, 1);
  p.settle();
  EXPECT_TRUE(next->has_value());
}

// peer_close(): unknown until a re-arming wait has put EPOLLRDHUP into the registration.
TEST(PeerClose, UnknownUntilARearmedWait) {
  Pair p;
  EXPECT_EQ(peer_close(p.near), PeerClose::unknown);
  p.rearmed_wait_for(1);
  EXPECT_NE(peer_close(p.near), PeerClose::unknown);
}

// The case that makes a short read ambiguous: bytes and FIN in one report. The read takes
// both (the next recv() says 0) and no edge follows; peer_close() says the FIN was reported.
TEST(PeerClose, AFinThatCameWithTheBytesIsReported) {
  Pair p;
  p.rearmed_wait_for(5, true);
  EXPECT_EQ(p.read_once(), 5);
  EXPECT_EQ(peer_close(p.near), PeerClose::reported);
  EXPECT_EQ(p.read_once(), 0);
}

// Bytes reported without a FIN; the FIN comes after the report, before the read, which
// takes it along. It was not reported, and it raises an edge of its own: the edge wait that
// a pump makes after the short read completes, and the next recv() says 0.
TEST(PeerClose, AFinAfterTheReportRaisesAnEdge) {
  Pair p;
  p.rearmed_wait_for(5);
  p.far.shutdown(tcp::socket::shutdown_send);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // processed, not yet reported
  EXPECT_EQ(p.read_once(), 5);
  EXPECT_EQ(peer_close(p.near), PeerClose::not_reported);
  auto next = p.wait(Edge::read);
  p.settle();
  ASSERT_TRUE(next->has_value()) << "the FIN after the report raised no edge: a pump would hang";
  EXPECT_EQ(peer_close(p.near), PeerClose::reported);
  EXPECT_EQ(p.read_once(), 0);
}

// With nothing more from the peer, a short read's report says no FIN, and the edge wait
// after it sleeps: no re-arm and no wake-up for nothing.
TEST(PeerClose, NoFinNoEdge) {
  Pair p;
  p.rearmed_wait_for(2);
  EXPECT_EQ(p.read_once(), 2);
  EXPECT_EQ(peer_close(p.near), PeerClose::not_reported);
  auto next = p.wait(Edge::read);
  p.settle();
  EXPECT_FALSE(next->has_value());
  p.far.shutdown(tcp::socket::shutdown_send);
  p.settle();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ(p.read_once(), 0);
}

}  // namespace
}  // namespace vibepit::runtime
