#include "vibepit/runtime/accept_loop.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <asio/detail/throw_error.hpp>
#include <asio/ip/v6_only.hpp>

namespace vibepit::runtime {
namespace {

bool out_of_descriptors(const asio::error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}

}  // namespace

SpareDescriptor::SpareDescriptor() : fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

SpareDescriptor::~SpareDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

void SpareDescriptor::refuse_one(int listener, std::string_view refusal) {
  if (fd_ < 0) {
    fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);  // a shortage may have passed
    return;
  }
  ::close(fd_);
  // accept4 on the non-blocking listener: never blocks, even if the queue emptied.
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    if (!refusal.empty()) {
      [[maybe_unused]] auto sent = ::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
  }
  fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

asio::error_code set_reuse_port(int fd) {
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) == 0) return {};
  return asio::error_code(errno, asio::error::get_system_category());
}

asio::ip::tcp::socket listen_tcp(asio::io_context& io, const asio::ip::tcp::endpoint& at,
                                 const ListenOptions& options) {
  using asio::ip::tcp;
  tcp::socket s(io, at.protocol());
  s.set_option(tcp::socket::reuse_address(true));
  if (options.reuse_port) {
    asio::detail::throw_error(set_reuse_port(s.native_handle()), "setsockopt SO_REUSEPORT");
  }
  if (at.address().is_v6()) s.set_option(asio::ip::v6_only(true));
  if (options.no_delay) s.set_option(tcp::no_delay(true));
  if (options.defer_accept_s > 0 &&
      ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_DEFER_ACCEPT, &options.defer_accept_s,
                   sizeof options.defer_accept_s) != 0) {
    asio::detail::throw_error(asio::error_code(errno, asio::error::get_system_category()),
                              "setsockopt TCP_DEFER_ACCEPT");
  }
  s.bind(at);
  if (::listen(s.native_handle(), options.backlog) != 0) {
    asio::detail::throw_error(asio::error_code(errno, asio::error::get_system_category()),
                              "listen");
  }
  s.non_blocking(true);  // accept4 on it must never block
  return s;
}

void accept_fresh(asio::ip::tcp::socket& listener, asio::ip::tcp::socket& client,
                  asio::ip::tcp::endpoint& peer, asio::error_code& ec) {
  for (;;) {
    socklen_t len = static_cast<socklen_t>(peer.capacity());
    const int fd =
        ::accept4(listener.native_handle(), peer.data(), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      peer.resize(len);
      adopt_fresh(client, peer.protocol(), fd, ec);
      return;
    }
    // A client that gave up while queued, or a signal: take the next one.
    if (errno == ECONNABORTED || errno == EINTR) continue;
    ec =
        asio::error_code(errno == EWOULDBLOCK ? EAGAIN : errno, asio::error::get_system_category());
    return;
  }
}

void on_accept_error(asio::ip::tcp::socket& listener, const asio::error_code& ec,
                     const AcceptPolicy& policy) {
  if (out_of_descriptors(ec)) {
    if (policy.spare != nullptr) policy.spare->refuse_one(listener.native_handle(), policy.refusal);
    spdlog::warn("{}: accept: {} (backing off {} ms)", policy.what, ec.message(),
                 kAcceptBackoff.count());
  } else {
    spdlog::warn("{}: accept: {}", policy.what, ec.message());
  }
}

}  // namespace vibepit::runtime
