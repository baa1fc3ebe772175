#include "vibepit/runtime/reactor.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>

#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

namespace vibepit::runtime {

namespace {
asio::error_code errno_code(int e) {
  return asio::error_code(e, asio::error::get_system_category());
}

// ReadInterest needs two private members of Asio's epoll reactor: its epoll descriptor and a
// descriptor's registered events. An explicit instantiation may name private members
// ([temp.spec.general]/6), and the friend it defines hands the member pointer out. Here, in
// one translation unit, because a program may hold each such instantiation only once.
template <class Tag, typename Tag::type Member>
struct Expose {
  friend typename Tag::type member_of(Tag) { return Member; }
};
struct EpollFd {
  using type = int asio::detail::epoll_reactor::*;
  friend type member_of(EpollFd);
};
struct RegisteredEvents {
  using type = std::uint32_t asio::detail::epoll_reactor::descriptor_state::*;
  friend type member_of(RegisteredEvents);
};
// The events of a descriptor's latest readiness report: the reactor keeps them in the
// descriptor state's scheduler_operation base (a private base, hence the cast below), and
// hands them to perform_io() as the operation's result.
struct ReportedEvents {
  using type = unsigned int asio::detail::scheduler_operation::*;
  friend type member_of(ReportedEvents);
};
struct OwningReactor {
  using type = asio::detail::epoll_reactor* asio::detail::epoll_reactor::descriptor_state::*;
  friend type member_of(OwningReactor);
};
template struct Expose<EpollFd, &asio::detail::epoll_reactor::epoll_fd_>;
template struct Expose<OwningReactor, &asio::detail::epoll_reactor::descriptor_state::reactor_>;
template struct Expose<RegisteredEvents,
                       &asio::detail::epoll_reactor::descriptor_state::registered_events_>;
template struct Expose<ReportedEvents, &asio::detail::scheduler_operation::task_result_>;

asio::detail::epoll_reactor::descriptor_state* state_of(asio::ip::tcp::socket& socket) {
  auto& impl = reactor_detail::Internals<asio::ip::tcp::socket>::of(socket);
  if (impl.socket_ == asio::detail::invalid_socket) return nullptr;
  return impl.reactor_data_;
}
}  // namespace

asio::detail::reactor* reactor_detail::reactor_of(
    asio::detail::reactor::per_descriptor_data state) {
  return state->*member_of(OwningReactor{});
}

void reactor_detail::watch_peer_close(asio::ip::tcp::socket& socket) {
  auto* state = state_of(socket);
  if (state == nullptr) return;
  auto& registered = state->*member_of(RegisteredEvents{});
  if (registered != 0) registered |= EPOLLRDHUP;  // 0: not in epoll at all
}

PeerClose peer_close(asio::ip::tcp::socket& socket) {
  auto* state = state_of(socket);
  if (state == nullptr || (state->*member_of(RegisteredEvents{}) & EPOLLRDHUP) == 0) {
    return PeerClose::unknown;
  }
  // A C-style cast may name an inaccessible base ([expr.cast]/4); static_cast may not.
  const auto* op = (const asio::detail::scheduler_operation*)state;  // NOLINT
  return (op->*member_of(ReportedEvents{}) & EPOLLRDHUP) != 0 ? PeerClose::reported
                                                              : PeerClose::not_reported;
}

bool ReadInterest::set(bool reads) {
  auto& impl = reactor_detail::Internals<asio::ip::tcp::socket>::of(socket_);
  asio::detail::epoll_reactor::descriptor_state* state = impl.reactor_data_;
  if (impl.socket_ == asio::detail::invalid_socket || state == nullptr) return false;
  const std::uint32_t registered = state->*member_of(RegisteredEvents{});
  if (registered == 0) return false;  // not in epoll at all
  auto& reactor = asio::use_service<asio::detail::epoll_reactor>(
      asio::query(socket_.get_executor(), asio::execution::context));
  epoll_event ev{};
  // EPOLLPRI goes too: a socket's data-ready wake-up carries EPOLLIN | EPOLLPRI, and epoll
  // wakes its waiter if either is registered (what it then reports is whatever else is
  // true, such as EPOLLOUT). Urgent data is not used here.
  ev.events = reads ? registered : registered & ~static_cast<std::uint32_t>(EPOLLIN | EPOLLPRI);
  ev.data.ptr = state;
  return ::epoll_ctl(reactor.*member_of(EpollFd{}), EPOLL_CTL_MOD, impl.socket_, &ev) == 0;
}

asio::awaitable<asio::error_code> connect_fresh(asio::ip::tcp::socket& socket,
                                                asio::ip::tcp::endpoint to) {
  asio::error_code ec;
  const int fd = ::socket(to.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                          to.protocol().protocol());
  if (fd < 0) co_return errno_code(errno);
  adopt_fresh(socket, to.protocol(), fd, ec);
  if (ec) co_return ec;
  int rc;
  do {
    rc = ::connect(fd, to.data(), static_cast<socklen_t>(to.size()));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) co_return asio::error_code();
  if (errno != EINPROGRESS) co_return errno_code(errno);
  // A connecting socket is reported writable once connected, or with EPOLLERR/EPOLLHUP
  // when the attempt failed. A wait may also end for a report that was not this socket's
  // (4, in reactor.hpp), with the attempt still under way: then wait again. The connect
  // deadline bounds the whole, by closing the socket (operation_aborted).
  for (;;) {
    co_await async_wait_rearmed(socket, Edge::write, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return ec;
    const int s = socket.native_handle();
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    if (::getpeername(s, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0) {
      co_return asio::error_code();  // connected
    }
    if (errno != ENOTCONN) co_return errno_code(errno);
    int err = 0;  // not connected: failed (the reason), or still connecting (0)
    socklen_t len = sizeof err;
    if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) co_return errno_code(err);
  }
}

}  // namespace vibepit::runtime
