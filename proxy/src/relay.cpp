#include "vibepit/proxy/relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/post.hpp>
#include <asio/this_coro.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
constexpr std::size_t kBufferSize = 16 * 1024;
constexpr std::size_t kSpliceChunk = 256 * 1024;  // also the pipe size: fewer splice calls per byte

class Pipe {
 public:
  ~Pipe() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  bool open() {
    if (fds_[0] >= 0) return true;
    if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    ::fcntl(fds_[1], F_SETPIPE_SZ, static_cast<int>(kSpliceChunk));  // best effort
    return true;
  }
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

// Chunks a pump moves before it lets the other connections on this thread run.
constexpr int kBurst = 16;

// Asio's reactor is edge-triggered and async_wait() does not look at the socket first, so
// readiness that arrived before the wait was queued would be missed. poll() asks the kernel
// for the level state; anything that arrives after it raises a new edge for the wait.
bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

asio::awaitable<bool> wait_readable(tcp::socket& s, bool check_first) {
  if (check_first && readable_now(s.native_handle())) co_return true;
  asio::error_code ec;
  co_await s.async_wait(tcp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

asio::awaitable<void> yield_now() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

// Move bytes with splice() until EOF, error, or the kernel refuses splice for these fds.
// The socket is read until EAGAIN before waiting again.
asio::awaitable<Outcome> splice_pump(tcp::socket& from, tcp::socket& to,
                                     const std::function<void()>& on_activity,
                                     std::uint64_t& counter) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  // Wait for the first byte before making the pipe: idle tunnels hold no pipe.
  if (!co_await wait_readable(from, true)) co_return Outcome::failed;
  Pipe pipe;
  if (!pipe.open()) co_return Outcome::splice_refused;
  int burst = kBurst;
  for (;;) {
    ssize_t n = ::splice(from.native_handle(), nullptr, pipe.write_end(), nullptr, kSpliceChunk,
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (!co_await wait_readable(from, false)) co_return Outcome::failed;
        burst = kBurst;
        continue;
      }
      // Nothing is in the pipe here, so the copy path can take over cleanly.
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
    if (--burst == 0) {
      co_await yield_now();
      burst = kBurst;
    }
  }
}

asio::awaitable<Outcome> copy_pump(tcp::socket& from, tcp::socket& to,
                                   const std::function<void()>& on_activity,
                                   std::uint64_t& counter) {
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  // Wait for the first byte before allocating: idle tunnels hold no buffer.
  if (!co_await wait_readable(from, true)) co_return Outcome::failed;
  auto buf = std::make_unique<char[]>(kBufferSize);
  int burst = kBurst;
  for (;;) {
    std::size_t n = from.read_some(asio::buffer(buf.get(), kBufferSize), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      if (!co_await wait_readable(from, false)) co_return Outcome::failed;
      burst = kBurst;
      continue;
    }
    if (ec == asio::error::eof) co_return Outcome::eof;
    if (ec) co_return Outcome::failed;
    co_await asio::async_write(to, asio::buffer(buf.get(), n), tok);
    if (ec) co_return Outcome::failed;
    counter += n;
    on_activity();
    if (--burst == 0) {
      co_await yield_now();
      burst = kBurst;
    }
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
