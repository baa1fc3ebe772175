#include "vibepit/proxy/relay.hpp"

#include "vibepit/proxy/join.hpp"
#include "vibepit/runtime/reactor.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>

#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/this_coro.hpp>
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

asio::awaitable<void> yield_now() {
  co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

// The sockets are O_NONBLOCK (Asio sets that on their first asynchronous operation), so the
// pumps call recv/send/splice directly and only wait when the socket is likely empty.
// After EAGAIN the kernel signals a fresh edge for anything new, and async_wait_edge()
// waits for it without a system call (runtime/reactor.hpp). Elsewhere (a pump's start, a
// short read that may have stopped at a FIN the reactor cannot vouch for)
// async_wait_rearmed() re-arms the descriptor (EPOLL_CTL_MOD), which reports at once what
// is already there, and registers EPOLLRDHUP so that later short reads need no re-arm.

// Move bytes with splice() until EOF, error, or the kernel refuses splice for these fds.
asio::awaitable<Outcome> splice_pump(tcp::socket& from, tcp::socket& to,
                                     const std::function<void()>& on_activity,
                                     std::uint64_t& counter) {
  Pipe pipe;
  if (!pipe.open()) co_return Outcome::splice_refused;
  // While `to` is full, what reaches `from` only wakes the thread: `from` is not listened to
  // from then until this pump next has to wait for it (runtime/reactor.hpp).
  runtime::ReadInterest reads(from);
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  int burst = kBurst;
  for (;;) {
    ssize_t n = ::splice(from.native_handle(), nullptr, pipe.write_end(), nullptr, kSpliceChunk,
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (!reads.resume()) co_return Outcome::failed;
        co_await runtime::async_wait_edge(from, runtime::Edge::read, tok);
        if (ec) co_return Outcome::failed;
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
          reads.pause();
          co_await runtime::async_wait_edge(to, runtime::Edge::write, tok);
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

// How a pump knows its source is empty before it reads: not at all (read first), likely (a
// short read, or nothing read yet: wait, re-arming), surely (EAGAIN, or a fresh socket never
// read: wait for the next edge).
enum class Empty { no, likely, surely };

// After a short read: the receive queue was empty when recv() returned, but a FIN that came
// with the bytes raised no edge of its own. The reactor's latest report says whether it had
// come (runtime::peer_close): then the next recv() says 0; if not, a FIN to come will raise
// an edge. Unknown (no EPOLLRDHUP registered yet): re-arm.
Empty after_short_read(tcp::socket& s) {
  switch (runtime::peer_close(s)) {
    case runtime::PeerClose::reported:
      return Empty::no;
    case runtime::PeerClose::not_reported:
      return Empty::surely;
    case runtime::PeerClose::unknown:
      break;
  }
  return Empty::likely;
}

// One direction of a tunnel, from start to end, in one coroutine frame (a frame per
// nested call was a malloc each on a busy worker, where Asio's frame cache runs dry).
//
// Copy through a per-thread scratch buffer: a pump holds no memory of its own unless the
// receiver is slower than the sender, and then only for the bytes it could not take.
// Short exchanges (handshakes, requests) cost fewer system calls as plain copies; splice
// pays off once a direction streams, which a read that fills the buffer shows: then the
// pump hands over to splice_pump (with `use_splice`), and comes back to copying if the
// kernel refuses splice for these descriptors.
//
// A pump waits before it reads when the socket is most likely empty: at the start (the
// peer has not spoken yet, as a rule) and after a short read, re-arming the descriptor so
// that bytes already there are reported at once; the recv() that would only have said
// EAGAIN is saved. After an EAGAIN the wait needs no re-arm.
//
// `other_eof` is shared by the two pumps of one tunnel. The direction that reaches EOF
// second closes both sockets instead of shutting one down: the close carries the FIN and
// saves a syscall. Both receive queues are drained by then, so the close sends FIN, not RST.
//
// `check`, when not null, sees the bytes first (the client's side of a tunnel under the SNI
// check): nothing is sent until it passes them, and on its refusal the pump sends its alert
// back and closes both sides.
asio::awaitable<void> pump(tcp::socket& from, tcp::socket& to, bool use_splice,
                           const std::function<void()>& on_activity, std::uint64_t& counter,
                           bool& spliced, bool& other_eof, Empty empty, TunnelCheck* check) {
  thread_local char scratch[kBufferSize];
  asio::error_code ec;
  auto tok = asio::redirect_error(asio::use_awaitable, ec);
  Outcome out = Outcome::eof;
  int burst = kBurst;
  for (;;) {
    if (empty != Empty::no) {
      if (empty == Empty::surely) {
        co_await runtime::async_wait_edge(from, runtime::Edge::read, tok);
      } else {
        co_await runtime::async_wait_rearmed(from, runtime::Edge::read, tok);
      }
      if (ec) {
        out = Outcome::failed;
        break;
      }
      burst = kBurst;
    }
    ssize_t n = ::recv(from.native_handle(), scratch, sizeof scratch, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) {
        empty = Empty::no;
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        out = Outcome::failed;
        break;
      }
      empty = Empty::surely;
      continue;
    }
    if (n == 0) break;  // EOF
    empty = static_cast<std::size_t>(n) < sizeof scratch ? after_short_read(from) : Empty::no;
    auto len = static_cast<std::size_t>(n);
    if (check != nullptr) {
      const auto step = check->offer(std::string_view(scratch, len));
      if (step == TunnelCheck::Step::more) {
        on_activity();
        continue;  // held by the check
      }
      if (step == TunnelCheck::Step::refuse) {
        const auto alert = check->alert();
        if (!alert.empty()) {
          (void)::send(from.native_handle(), alert.data(), alert.size(),
                       MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        out = Outcome::failed;
        break;
      }
      if (!check->held().empty()) {
        co_await asio::async_write(to, asio::buffer(check->held()), tok);
        if (ec) {
          out = Outcome::failed;
          break;
        }
        counter += check->held().size();
      }
      check->release_held();
      check = nullptr;
    }
    std::size_t sent = 0;
    while (sent < len) {
      ssize_t w =
          ::send(to.native_handle(), scratch + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
      if (w > 0) {
        sent += static_cast<std::size_t>(w);
        continue;
      }
      // The receiver is full: keep the rest privately while we wait, since the scratch
      // buffer belongs to every pump on this thread.
      std::string rest(scratch + sent, len - sent);
      co_await asio::async_write(to, asio::buffer(rest), tok);
      if (!ec) sent = len;
      break;
    }
    if (sent < len) {
      out = Outcome::failed;
      break;
    }
    counter += len;
    on_activity();
    if (use_splice && len == sizeof scratch) {
      out = co_await splice_pump(from, to, on_activity, counter);
      if (out != Outcome::splice_refused) {
        spliced = true;
        break;
      }
      use_splice = false;  // copy on, from where splice left off
      empty = Empty::likely;
      continue;
    }
    if (--burst == 0) {
      co_await yield_now();
      burst = kBurst;
    }
  }
  if (out == Outcome::eof) {
    if (other_eof) {
      close_both(from, to);
      co_return;
    }
    other_eof = true;
    half_close(to);
  } else {
    close_both(from, to);
  }
}

}  // namespace

asio::awaitable<void> relay(tcp::socket& client, tcp::socket& upstream, bool use_splice,
                            const std::function<void()>& on_activity, RelayStats& stats,
                            TunnelCheck* check) {
  asio::error_code ignored;
  // Both sockets have had asynchronous operations, so they are O_NONBLOCK already; this
  // makes sure of it for a socket that has not.
  if (!client.native_non_blocking()) client.native_non_blocking(true, ignored);
  if (!upstream.native_non_blocking()) upstream.native_non_blocking(true, ignored);
  bool spliced_up = false, spliced_down = false, one_eof = false;
  // The client's head was read (a short read, so re-arm); the upstream was never read.
  co_await both(pump(client, upstream, use_splice, on_activity, stats.up, spliced_up, one_eof,
                     Empty::likely, check),
                pump(upstream, client, use_splice, on_activity, stats.down, spliced_down, one_eof,
                     Empty::surely, nullptr));
  stats.spliced = spliced_up || spliced_down;
}

}  // namespace vibepit::proxy
