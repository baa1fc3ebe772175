#include "vibepit/runtime/reactor.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

namespace vibepit::runtime {

namespace {
asio::error_code errno_code(int e) {
  return asio::error_code(e, asio::error::get_system_category());
}
}  // namespace

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
  // when the attempt failed: either way the wait ends only when the attempt has.
  co_await socket.async_wait(asio::ip::tcp::socket::wait_write,
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return ec;  // closed meanwhile (the connect deadline): operation_aborted
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  co_return err != 0 ? errno_code(err) : asio::error_code();
}

}  // namespace vibepit::runtime
