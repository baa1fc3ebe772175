#include "vibepit/runtime/accept_loop.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

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

void on_accept_error(asio::ip::tcp::acceptor& acceptor, const asio::error_code& ec,
                     const AcceptPolicy& policy) {
  if (out_of_descriptors(ec)) {
    if (policy.spare != nullptr) policy.spare->refuse_one(acceptor.native_handle(), policy.refusal);
    spdlog::warn("{}: accept: {} (backing off {} ms)", policy.what, ec.message(),
                 kAcceptBackoff.count());
  } else {
    spdlog::warn("{}: accept: {}", policy.what, ec.message());
  }
}

}  // namespace vibepit::runtime
