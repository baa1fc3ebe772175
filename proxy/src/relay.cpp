#include "vibepit/proxy/relay.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
constexpr std::size_t kBufferSize = 16 * 1024;
constexpr std::size_t kSpliceChunk = 64 * 1024;

class Pipe {
 public:
  ~Pipe() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  bool open() { return fds_[0] >= 0 || ::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) == 0; }
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }

 private:
  int fds_[2] = {-1, -1};
};

void close_both(tcp::socket& a, tcp::socket& b) {
  asio::error_code ignored;
  a.close(ignored);
  b.close(ignored);
}

void half_close(tcp::socket& to) {
  asio::error_code ignored;
  to.shutdown(tcp::socket::shutdown_send, ignored);
}

enum class Outcome { eof, failed, splice_refused };

// Move bytes with splice() until EOF, error, or the kernel refuses splice for these fds.
asio::awaitable<Outcome> splice_pump(tcp::socket& from, tcp::socket& to,
                                     const std::function<void()>& on_activity,
                                     std::uint64_t& counter) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  Pipe pipe;  // made on first data, so idle tunnels hold no pipe
  for (;;) {
    co_await from.async_wait(tcp::socket::wait_read, tok);
    if (ec) co_return Outcome::failed;
    if (!pipe.open()) co_return Outcome::splice_refused;
    ssize_t n = ::splice(from.native_handle(), nullptr, pipe.write_end(), nullptr, kSpliceChunk,
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EINVAL || errno == ENOSYS) co_return Outcome::splice_refused;
      co_return Outcome::failed;
    }
    if (n == 0) co_return Outcome::eof;
    auto in_pipe = static_cast<std::size_t>(n);
    while (in_pipe > 0) {
      ssize_t m = ::splice(pipe.read_end(), nullptr, to.native_handle(), nullptr, in_pipe,
                           SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (m < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          co_await to.async_wait(tcp::socket::wait_write, tok);
          if (ec) co_return Outcome::failed;
          continue;
        }
        // Bytes are stuck in the pipe: the tunnel cannot continue correctly.
        co_return Outcome::failed;
      }
      in_pipe -= static_cast<std::size_t>(m);
      counter += static_cast<std::uint64_t>(m);
    }
    on_activity();
  }
}

asio::awaitable<Outcome> copy_pump(tcp::socket& from, tcp::socket& to,
                                   const std::function<void()>& on_activity,
                                   std::uint64_t& counter) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  std::unique_ptr<char[]> buf;  // allocated on first data, so idle tunnels hold no buffer
  for (;;) {
    co_await from.async_wait(tcp::socket::wait_read, tok);
    if (ec) co_return Outcome::failed;
    if (!buf) buf = std::make_unique<char[]>(kBufferSize);
    std::size_t n = from.read_some(asio::buffer(buf.get(), kBufferSize), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) continue;
    if (ec == asio::error::eof) co_return Outcome::eof;
    if (ec) co_return Outcome::failed;
    co_await asio::async_write(to, asio::buffer(buf.get(), n), tok);
    if (ec) co_return Outcome::failed;
    counter += n;
    on_activity();
  }
}

asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, bool use_splice,
                           const std::function<void()>& on_activity, std::uint64_t& counter,
                           bool& spliced) {
  Outcome out = Outcome::splice_refused;
  if (use_splice) {
    out = co_await splice_pump(from, to, on_activity, counter);
    if (out != Outcome::splice_refused) spliced = true;
  }
  if (out == Outcome::splice_refused) out = co_await copy_pump(from, to, on_activity, counter);
  if (out == Outcome::eof) {
    half_close(to);
  } else {
    close_both(from, to);
  }
}

}  // namespace

asio::awaitable<void> relay(tcp::socket& client, tcp::socket& upstream, bool use_splice,
                            const std::function<void()>& on_activity, RelayStats& stats) {
  using namespace asio::experimental::awaitable_operators;
  asio::error_code ignored;
  // User-level non-blocking: read_some() returns would_block instead of waiting, and the
  // fds are O_NONBLOCK for splice().
  client.non_blocking(true, ignored);
  upstream.non_blocking(true, ignored);
  bool spliced_up = false, spliced_down = false;
  co_await (pump(client, upstream, use_splice, on_activity, stats.up, spliced_up) &&
            pump(upstream, client, use_splice, on_activity, stats.down, spliced_down));
  stats.spliced = spliced_up || spliced_down;
}

}  // namespace vibepit::proxy
