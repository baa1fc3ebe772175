#pragma once
// The four places where vibepit works below Asio's public interface, with its epoll reactor
// (Asio 1.22, asio::detail; the checks below pin the version and the back end). Each saves
// system calls or wake-ups and changes nothing else.
//
// 1. async_wait_edge(): waiting for a socket's next readiness edge without a system call.
//
// The relay pumps (and the DNS server's UDP loop) do their own non-blocking recv, send and
// splice, and only need Asio to say when to try again. Asio's socket::async_wait() costs an
// epoll_ctl(EPOLL_CTL_MOD) per wait: it re-arms the descriptor because it cannot know
// whether readiness was already reported and missed. A pump that has just been told EAGAIN
// does know: from that moment anything new (bytes, FIN, RST, room to write) makes the
// kernel signal a new edge on the descriptor, which Asio registered edge-triggered.
//
// async_wait_edge() queues an operation on Asio's epoll reactor that completes on that
// next edge. The one case it must not miss: an edge that came while no operation was
// waiting. The reactor remembers it (its per-descriptor "try speculative" flag, set by
// every event), and then this operation completes at once. Either way it tells the
// reactor the edge has been consumed (done_and_exhausted), so the flag is clear until the
// next one. A wait costs no system call, where async_wait() costs one.
//
// The contract, which is the caller's side of edge-triggered I/O: wait only after the
// kernel said EAGAIN, and after a completion read (or write) until it says EAGAIN again.
// For a datagram socket a recvmmsg() that returned fewer messages than asked counts as
// EAGAIN (it stopped on one). For a stream socket a short read does not: when the data
// and the FIN arrive together there is one edge, recv() returns the data, and the FIN
// that the next recv() would report raises no new edge. There, after a short read,
// re-arm with async_wait_rearmed() (or read again), unless peer_close() (4, below) knows.
//
// async_wait_rearmed() is the wait for when the caller cannot know the socket is empty: it
// re-arms the registration (one EPOLL_CTL_MOD, which reports at once whatever is already
// there) and, like async_wait_edge(), consumes the read edge it completes on, where Asio's
// async_wait() leaves it on record and the next edge wait would complete at once for it.
//
// A completion may be spurious (an edge whose bytes were already read); the next call then
// says EAGAIN. Use it only on a socket whose io_context runs on one thread (the proxy's
// and the DNS server's workers each run their own). Closing the socket completes a pending
// wait with operation_aborted. It does not take part in per-operation cancellation.
//
// 2. adopt_fresh(): a socket made by accept4() or socket() with SOCK_NONBLOCK|SOCK_CLOEXEC,
// handed to Asio with what Asio cannot find out for itself (and a first wait on it is for
// its first edge). Asio's own accept and open
// make blocking descriptors, and its first operation on each costs an ioctl(FIONBIO); and
// any descriptor that comes in through assign() (as its accept does) may be a dup(), so
// closing it costs an epoll_ctl(EPOLL_CTL_DEL). A descriptor we just made is neither: it is
// non-blocking, and closing it, the only reference, takes it out of epoll with no call.
#include <unistd.h>

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/awaitable.hpp>
#include <asio/basic_socket.hpp>
#include <asio/detail/bind_handler.hpp>
#include <asio/detail/fenced_block.hpp>
#include <asio/detail/handler_alloc_helpers.hpp>
#include <asio/detail/handler_work.hpp>
#include <asio/detail/reactor.hpp>
#include <asio/detail/reactor_op.hpp>
#include <asio/detail/socket_ops.hpp>
#include <asio/error_code.hpp>
#include <asio/execution/context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/query.hpp>
#include <asio/version.hpp>

#if !defined(ASIO_HAS_EPOLL) || defined(ASIO_HAS_IO_URING_AS_DEFAULT)
#error "reactor.hpp needs Asio's epoll reactor"
#endif
static_assert(ASIO_VERSION >= 102200 && ASIO_VERSION < 102300,
              "reactor.hpp was written against Asio 1.22's reactor; check "
              "epoll_reactor::start_op and descriptor_state::perform_io before changing this");

namespace vibepit::runtime {

enum class Edge { read, write };

namespace reactor_detail {

// The socket's descriptor and its reactor registration. basic_socket keeps them in a
// protected member; a pointer to it, formed in a derived class, reads it from any socket.
template <class Socket>
struct Internals : Socket {
  static auto& of(Socket& s) { return (s.*&Internals::impl_).get_implementation(); }
};

// The reactor that `state` (a socket's registration) belongs to. Asio's own way,
// use_service() on the socket's execution context, takes the service registry's mutex and
// walks its list: five times a tunnel, 4% of the I/O thread's instructions.
asio::detail::reactor* reactor_of(asio::detail::reactor::per_descriptor_data state);

template <class Handler, class IoExecutor>
class WaitOp : public asio::detail::reactor_op {
 public:
  ASIO_DEFINE_HANDLER_PTR(WaitOp);

  WaitOp(Handler& handler, const IoExecutor& io_ex, bool consume)
      : reactor_op(asio::error_code(), &WaitOp::do_perform, &WaitOp::do_complete),
        handler_(std::move(handler)),
        work_(handler_, io_ex),
        consume_(consume) {}

  // Called by the reactor when an edge has been seen (at once, if one came while nothing
  // waited). No system call: the caller does the I/O. "Exhausted" clears the reactor's
  // memory of the edge, so the next wait sleeps until the kernel signals again; without
  // it, the reactor's own next operation in that direction tries the I/O at once.
  static status do_perform(reactor_op* base) {
    return static_cast<WaitOp*>(base)->consume_ ? done_and_exhausted : done;
  }

  static void do_complete(void* owner, asio::detail::operation* base,
                          const asio::error_code& /*ec*/, std::size_t /*bytes*/) {
    auto* o = static_cast<WaitOp*>(base);
    ptr p = {std::addressof(o->handler_), o, o};
    asio::detail::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    // The handler is moved out before the operation's memory is freed, as Asio's own
    // operations do: the memory may belong to the handler (a coroutine frame's recycler).
    asio::detail::binder1<Handler, asio::error_code> handler(o->handler_, o->ec_);
    p.h = std::addressof(handler.handler_);
    p.reset();
    if (owner) {
      asio::detail::fenced_block b(asio::detail::fenced_block::half);
      w.complete(handler, handler.handler_);
    }
  }

 private:
  Handler handler_;
  asio::detail::handler_work<Handler, IoExecutor> work_;
  bool consume_;
};

template <class Socket>
struct Initiate {
  Socket* socket;
  Edge edge;
  bool rearm;

  template <class Handler>
  void operator()(Handler&& handler) const {
    using H = std::decay_t<Handler>;
    using Op = WaitOp<H, typename Socket::executor_type>;
    H h(std::forward<Handler>(handler));
    typename Op::ptr p = {std::addressof(h), Op::ptr::allocate(h), nullptr};
    // A re-arming write wait leaves the edge on record: it is the wait for a connect, after
    // which the socket has room, and Asio's first write (an async_write(), which waits for a
    // new edge when none is on record) must try at once.
    const bool consume = !(rearm && edge == Edge::write);
    p.p = new (p.v) Op(h, socket->get_executor(), consume);
    auto& impl = Internals<Socket>::of(*socket);
    // A closed socket has no registration: its wait completes with bad_descriptor, through
    // the reactor found the slow way.
    auto& reactor = impl.reactor_data_ ? *reactor_of(impl.reactor_data_)
                                       : asio::use_service<asio::detail::reactor>(asio::query(
                                             socket->get_executor(), asio::execution::context));
    // Edge wait (allow_speculative): perform at once if the reactor holds an unconsumed
    // edge; else queue the operation. Neither re-arms the descriptor (a first write wait
    // adds EPOLLOUT to its registration, once). Re-arming wait: queue it, and re-register
    // the descriptor with Asio's copy of its events (plus EPOLLOUT for a write wait), which
    // reports at once what is already there. A closed socket completes with bad_descriptor.
    reactor.start_op(
        edge == Edge::read ? asio::detail::reactor::read_op : asio::detail::reactor::write_op,
        impl.socket_, impl.reactor_data_, p.p, false, !rearm);
    p.v = p.p = nullptr;
  }
};

// EPOLLRDHUP in the registration, for peer_close() (4, below). Only async_wait_rearmed()
// calls it: its re-arm is what hands the new events to epoll.
void watch_peer_close(asio::ip::tcp::socket& socket);

}  // namespace reactor_detail

// Complete when `socket` next becomes readable (or writable), as described above.
// Completion signature: void(asio::error_code).
template <class Socket, class Token>
auto async_wait_edge(Socket& socket, Edge edge, Token&& token) {
  return asio::async_initiate<Token, void(asio::error_code)>(
      reactor_detail::Initiate<Socket>{&socket, edge, false}, token);
}

// Complete when `socket` is readable (or writable), now or later: re-arms the registration
// (one EPOLL_CTL_MOD). A read wait consumes the edge it completes on (read until EAGAIN, or
// a short read, before the next edge wait); a write wait does not (see Initiate). For a
// stream socket it also puts EPOLLRDHUP into the registration, so that peer_close() can
// answer from then on.
// Completion signature: void(asio::error_code).
template <class Socket, class Token>
auto async_wait_rearmed(Socket& socket, Edge edge, Token&& token) {
  if constexpr (std::is_same_v<Socket, asio::ip::tcp::socket>)
    reactor_detail::watch_peer_close(socket);
  return asio::async_initiate<Token, void(asio::error_code)>(
      reactor_detail::Initiate<Socket>{&socket, edge, true}, token);
}

// Give `socket` (closed) the descriptor `fd`, made by accept4() or socket() with
// SOCK_NONBLOCK and SOCK_CLOEXEC by the caller: registered with the reactor like any other,
// known to be non-blocking, and known to be no duplicate. On error `fd` is closed.
template <class Socket>
void adopt_fresh(Socket& socket, const typename Socket::protocol_type& protocol, int fd,
                 asio::error_code& ec) {
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  auto& impl = reactor_detail::Internals<Socket>::of(socket);
  impl.state_ |= asio::detail::socket_ops::internal_non_blocking;
  impl.state_ &= ~asio::detail::socket_ops::possible_dup;
  // The reactor starts every registration as if an edge had come (it cannot know better),
  // so a first async_wait_edge() for reading would complete at once for nothing. Here it
  // can know: EPOLL_CTL_ADD, moments ago, reported whatever was already there to read as
  // an event still to come. Consume the assumed edge with a no-op wait, so that a first
  // read wait on a fresh socket sleeps until something happens (and a first Asio read on
  // it waits for the event instead of trying a recv that would say EAGAIN). Not for
  // writing: a new socket has room, and Asio's first write should just write (without
  // the assumed edge it would first add EPOLLOUT to the registration and wait for it).
  async_wait_edge(socket, Edge::read, [](const asio::error_code&) {});
}

// 3. ReadInterest: not being woken for what a pump cannot use yet.
//
// Asio registers every socket for EPOLLIN (edge-triggered) once and for all. A pump whose
// receiver is full waits for room to write, and meanwhile every segment that reaches its
// source still raises an edge, which wakes the thread for nothing to do: in a bulk download
// through a slower client, runs of a dozen epoll_wait calls with no I/O between them.
// pause() takes EPOLLIN (and EPOLLPRI, which every data-ready wake-up also carries) out of
// the source's registration (EPOLL_CTL_MOD) until resume() puts them back. Resuming
// reports at once what arrived meanwhile: EPOLL_CTL_MOD re-reads the descriptor's state,
// so the edge the pause held back is not lost, and a wait for the next edge after
// resume() follows the contract above unchanged. EPOLLERR and EPOLLHUP stay
// registered throughout, and the paused pump's own reads do not need the registration.
// What Asio asks of the registration meanwhile (EPOLLOUT for a write wait) it still gets:
// Asio keeps its own copy of the events and re-registers from it, which resumes reads early
// at worst. On the thread that runs the socket's io_context only.
class ReadInterest {
 public:
  explicit ReadInterest(asio::ip::tcp::socket& socket) : socket_(socket) {}
  ReadInterest(const ReadInterest&) = delete;
  ReadInterest& operator=(const ReadInterest&) = delete;
  ~ReadInterest() {
    if (paused_) set(true);
  }
  // Best effort: if the kernel refuses, the pump is woken for nothing, as before.
  void pause() {
    if (!paused_) paused_ = set(false);
  }
  // False if EPOLLIN could not be put back, in which case the socket's reads would never be
  // reported again: the caller must not wait for them (treat it as a failed connection).
  bool resume() {
    if (!paused_) return true;
    paused_ = false;
    return set(true);
  }
  bool paused() const { return paused_; }

 private:
  bool set(bool reads);
  asio::ip::tcp::socket& socket_;
  bool paused_ = false;
};

// 4. peer_close(): whether a short read took the FIN with it, from the readiness report.
//
// A short read from a stream socket may have consumed a FIN that came with the data (1,
// above): the next recv() would say 0, and no new edge will come, so without knowing more a
// pump re-arms (EPOLL_CTL_MOD) after every short read. With EPOLLRDHUP in the registration,
// the reactor's latest report on the socket says whether the FIN had come by then: the
// kernel reports EPOLLRDHUP in every report from the moment it has processed the FIN, and a
// FIN processed after a report raises an edge of its own. So after a short read: if the
// latest report had EPOLLRDHUP, read again (it says 0, or returns the last bytes); if not,
// a FIN still to come will wake an edge wait, which costs no call.
//
// Asio registers sockets without EPOLLRDHUP. reactor_detail::watch_peer_close() adds it to
// Asio's copy of the registration, and the re-arm that follows at once hands it to the
// kernel: it is called only by async_wait_rearmed(), right before its EPOLL_CTL_MOD (and every
// later re-registration, Asio's or ReadInterest's, is made from that copy). Until then peer_close()
// says `unknown`. On the thread that runs the socket's io_context only.
//
// The report may be another descriptor's: Asio hands a closed socket's descriptor state to
// the next socket it registers, and as far as its code shows, a report already queued for
// the old descriptor in the same pass of the event loop is still performed on the state.
// Such a report can only come before the new socket's own, and the re-arm that registered
// EPOLLRDHUP makes the kernel report the socket afresh if anything is there: a stale
// EPOLLRDHUP costs one recv() that says EAGAIN, a stale report without it an edge wait that
// the fresh report completes. A stale EPOLLOUT is why a connect's result is not read from
// the report, nor from getsockopt(SO_ERROR) alone, which says 0 while the connect is still
// under way: connect_fresh() asks getpeername() (ENOTCONN until connected), and waits again
// when the socket is neither connected nor failed.
enum class PeerClose { unknown, reported, not_reported };
PeerClose peer_close(asio::ip::tcp::socket& socket);

// Connect `socket` (closed) to `to` on a fresh descriptor (socket() with SOCK_NONBLOCK and
// SOCK_CLOEXEC, adopt_fresh): connect(), one re-arming wait for writability (which also
// registers EPOLLRDHUP, 4), and getpeername() for the result (getsockopt(SO_ERROR) for the
// reason of a failure), where Asio's async_connect() adds an ioctl(FIONBIO) and a poll(). Closing
// the socket meanwhile ends it with operation_aborted; a failed connect leaves the socket open for
// the caller to close. `to` by value: the coroutine starts later.
asio::awaitable<asio::error_code> connect_fresh(asio::ip::tcp::socket& socket,
                                                asio::ip::tcp::endpoint to);

}  // namespace vibepit::runtime
