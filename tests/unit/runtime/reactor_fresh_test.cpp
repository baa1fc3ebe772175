// runtime/reactor.hpp: adopt_fresh() and connect_fresh(), the sockets we make ourselves.
// Real loopback sockets.
#include "vibepit/runtime/reactor.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include <asio/co_spawn.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

namespace vibepit::runtime {
namespace {

using asio::ip::tcp;

// adopt_fresh() and connect_fresh(): sockets we make ourselves, non-blocking and
// close-on-exec, whose first read wait is for their first edge.
struct Fresh {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(io);
  tcp::socket listener{io};
  tcp::endpoint at;

  Fresh() {
    listener = listen_on_loopback();
    at = listener.local_endpoint();
  }
  tcp::socket listen_on_loopback() {
    tcp::socket s(io, tcp::v4());
    s.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    EXPECT_EQ(::listen(s.native_handle(), 16), 0);
    return s;
  }
  // accept4 the next client into an adopted socket.
  tcp::socket accept() {
    tcp::socket s(io);
    const int fd =
        ::accept4(listener.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    asio::error_code ec;
    adopt_fresh(s, tcp::v4(), fd, ec);
    EXPECT_FALSE(ec) << ec.message();
    return s;
  }
  void settle() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (int i = 0; i < 3; ++i) io.poll();
  }
  asio::error_code connect(tcp::socket& s, tcp::endpoint to) {
    std::optional<asio::error_code> out;
    asio::co_spawn(io, connect_fresh(s, to), [&](std::exception_ptr e, asio::error_code ec) {
      EXPECT_FALSE(e);
      out = ec;
    });
    for (int i = 0; i < 100 && !out; ++i) settle();
    EXPECT_TRUE(out.has_value()) << "connect_fresh did not finish";
    return out.value_or(asio::error::timed_out);
  }
};

bool has_flags(int fd) {
  return (::fcntl(fd, F_GETFL) & O_NONBLOCK) && (::fcntl(fd, F_GETFD) & FD_CLOEXEC);
}

TEST(AdoptFresh, TheFirstReadWaitSleepsUntilBytesCome) {
  Fresh f;
  tcp::socket client(f.io);
  ASSERT_FALSE(f.connect(client, f.at));
  auto s = f.accept();
  EXPECT_TRUE(has_flags(s.native_handle()));
  std::optional<asio::error_code> done;
  async_wait_edge(s, Edge::read, [&](const asio::error_code& ec) { done = ec; });
  f.settle();
  EXPECT_FALSE(done.has_value()) << "a fresh socket's first wait completed with nothing to read";
  ASSERT_EQ(::send(client.native_handle(), "hi", 2, MSG_NOSIGNAL), 2);
  f.settle();
  ASSERT_TRUE(done.has_value());
  EXPECT_FALSE(done.value());
}

// The bytes came before the socket was adopted (the client spoke before accept): its
// registration reports them, and the first wait completes.
TEST(AdoptFresh, BytesThatCameBeforeAdoptionCompleteTheFirstWait) {
  Fresh f;
  tcp::socket client(f.io);
  ASSERT_FALSE(f.connect(client, f.at));
  ASSERT_EQ(::send(client.native_handle(), "early", 5, MSG_NOSIGNAL), 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto s = f.accept();
  std::optional<asio::error_code> done;
  async_wait_edge(s, Edge::read, [&](const asio::error_code& ec) { done = ec; });
  f.settle();
  ASSERT_TRUE(done.has_value()) << "the bytes already there were never reported";
  char buf[8];
  EXPECT_EQ(::recv(s.native_handle(), buf, sizeof buf, MSG_DONTWAIT), 5);
}

// Asio's own operations work on an adopted socket, and a first write just writes.
TEST(AdoptFresh, AsioOperationsWork) {
  Fresh f;
  tcp::socket client(f.io);
  ASSERT_FALSE(f.connect(client, f.at));
  auto s = f.accept();
  std::optional<std::size_t> wrote, read;
  char buf[8];
  asio::async_write(s, asio::buffer("ping", 4),
                    [&](const asio::error_code& ec, std::size_t n) { wrote = ec ? 0 : n; });
  asio::async_read(client, asio::buffer(buf, 4),
                   [&](const asio::error_code& ec, std::size_t n) { read = ec ? 0 : n; });
  f.settle();
  EXPECT_EQ(wrote, 4u);
  EXPECT_EQ(read, 4u);
  EXPECT_EQ(std::string(buf, 4), "ping");
}

TEST(ConnectFresh, ConnectsWithANonBlockingCloseOnExecSocket) {
  Fresh f;
  tcp::socket s(f.io);
  ASSERT_FALSE(f.connect(s, f.at));
  EXPECT_TRUE(s.is_open());
  EXPECT_TRUE(has_flags(s.native_handle()));
  EXPECT_EQ(s.remote_endpoint(), f.at);
}

// The connect's wait leaves the write edge on record: Asio's first write on the connected
// socket writes at once instead of waiting for an edge that will not come. And the
// connect registered EPOLLRDHUP (peer_close() knows).
TEST(ConnectFresh, AsioWritesAtOnceAfterTheConnect) {
  Fresh f;
  tcp::socket s(f.io);
  ASSERT_FALSE(f.connect(s, f.at));
  auto peer = f.accept();
  std::optional<std::size_t> wrote;
  asio::async_write(s, asio::buffer("ping", 4),
                    [&](const asio::error_code& ec, std::size_t n) { wrote = ec ? 0 : n; });
  f.settle();
  ASSERT_TRUE(wrote.has_value()) << "the first write after connect_fresh waited for an edge";
  EXPECT_EQ(*wrote, 4u);
  EXPECT_NE(peer_close(s), PeerClose::unknown);
}

// A report the kernel did not make for this socket, queued as the reactor queues one after
// epoll_wait(): what a stale report on a reused descriptor state amounts to (4, reactor.hpp).
template <class Tag, typename Tag::type Member>
struct Steal {
  friend typename Tag::type stolen(Tag) { return Member; }
};
struct TaskResult {
  using type = unsigned int asio::detail::scheduler_operation::*;
  friend type stolen(TaskResult);
};
template struct Steal<TaskResult, &asio::detail::scheduler_operation::task_result_>;

void inject_report(asio::io_context& io, tcp::socket& s, std::uint32_t events) {
  auto* state = reactor_detail::Internals<tcp::socket>::of(s).reactor_data_;
  ASSERT_NE(state, nullptr);
  auto* op = (asio::detail::scheduler_operation*)state;  // a private base: see reactor.cpp
  op->*stolen(TaskResult{}) = events;
  asio::use_service<asio::detail::scheduler>(io).post_immediate_completion(op, false);
}

// A connect whose SYN is dropped (the listener's accept queue is full) stays under way; a
// writability report that was not the connect's must not make it a connection.
TEST(ConnectFresh, AReportWhileTheConnectIsUnderWayIsNotAConnection) {
  Fresh f;
  tcp::socket full(f.io, tcp::v4());
  full.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  ASSERT_EQ(::listen(full.native_handle(), 0), 0);
  tcp::socket first(f.io);
  first.connect(full.local_endpoint());  // the one place in the accept queue
  tcp::socket s(f.io);
  std::optional<asio::error_code> out;
  asio::co_spawn(f.io, connect_fresh(s, full.local_endpoint()),
                 [&](std::exception_ptr e, asio::error_code ec) {
                   EXPECT_FALSE(e);
                   out = ec;
                 });
  f.settle();
  ASSERT_FALSE(out.has_value()) << "a SYN to a full accept queue was answered";
  inject_report(f.io, s, EPOLLOUT);
  f.settle();
  EXPECT_FALSE(out.has_value()) << "connect_fresh ended on a report that was not the connect's: "
                                << out.value_or(asio::error_code()).message();
  s.close();  // what the connect deadline does
  f.settle();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(*out, asio::error::operation_aborted);
}

TEST(ConnectFresh, ARefusedConnectSaysSo) {
  Fresh f;
  tcp::endpoint closed;
  {
    auto l = f.listen_on_loopback();  // a port that was just free, and is again
    closed = l.local_endpoint();
  }
  tcp::socket s(f.io);
  EXPECT_EQ(f.connect(s, closed), asio::error::connection_refused);
}

}  // namespace
}  // namespace vibepit::runtime
