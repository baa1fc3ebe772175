// Ask mode: a request that no rule allows waits, instead of being refused, until an allow
// covers it. It waits on one timer, set to its deadline; everything that could change its
// fate cancels that timer, and it looks again: a rule update (PendingTable::rules_changed),
// the user's refusal, ask mode turned off, the proxy draining, the client hanging up, or
// the connection's own last-resort deadline. Each look happens on this session's thread,
// and a wake is a post to that thread, so no wake falls between a look and the next wait.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

#include <asio/post.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>

#include "vibepit/proxy/session.hpp"
#include "vibepit/proxy/upstream.hpp"
#include "vibepit/proxy/worker.hpp"
#include "vibepit/runtime/pending.hpp"

namespace vibepit::proxy {
namespace {

// The connection's own deadline while held, past the hold's: a last resort only.
constexpr std::chrono::seconds kHoldGrace{2};
// How often a client that sent bytes past its request is asked whether it hung up: its
// readiness no longer tells.
constexpr std::chrono::seconds kHangupPoll{1};

Unheld unheld_from(runtime::HoldEnd e) {
  switch (e) {
    case runtime::HoldEnd::refused:
      return Unheld::refused;
    case runtime::HoldEnd::ask_off:
      return Unheld::ask_off;
    default:
      return Unheld::shutdown;
  }
}

const char* hold_text(Unheld how) {
  switch (how) {
    case Unheld::expired:
      return "expired";
    case Unheld::refused:
      return "refused";
    case Unheld::ask_off:
      return "ask_off";
    case Unheld::shutdown:
      return "shutdown";
    default:
      return nullptr;  // never held
  }
}

}  // namespace

void Session::wake_hold() {
  if (hold_) hold_->timer.cancel();
}

void Session::end_hold() {
  if (hold_ && hold_->entry) {
    w_.pending().leave(*hold_->entry);
    hold_->entry.reset();
  }
}

void Session::watch_client() {
  client_.async_wait(asio::ip::tcp::socket::wait_read,
                     [weak = weak_from_this()](const asio::error_code& ec) {
                       if (ec == asio::error::operation_aborted) return;
                       if (auto self = weak.lock()) self->on_client_readable(ec);
                     });
}

void Session::on_client_readable(const asio::error_code& ec) {
  if (!hold_) return;
  if (ec) {
    hold_->gone = true;
  } else {
    char c;
    ssize_t n;
    do {
      n = ::recv(client_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      hold_->bytes_waiting = true;  // readiness stays set from now on: the hold polls
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch_client();  // nothing after all
      return;
    } else {
      hold_->gone = true;  // end of stream, or an error
    }
  }
  hold_->timer.cancel();
}

bool Session::client_hung_up() {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(client_.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  return info.tcpi_state == TCP_CLOSE_WAIT || info.tcpi_state == TCP_CLOSE;
}

// Not a coroutine: what it builds (the table's copy of the request, the wake, the held
// event's record) takes no room in the frame that lives as long as the hold.
std::shared_ptr<runtime::PendingTable::Entry> Session::enter_hold(
    const http::Authority& target, const decision_log::DecisionRecord& rec,
    runtime::PendingTable::Admit& admit) {
  runtime::PendingRequest req;
  req.id = rec.id;
  req.method = rec.method;
  req.host = target.host;
  req.port = target.port;
  req.client_ip = client_ip_;
  req.client_port = client_port_;
  req.since_us = decision_log::now_us();
  auto wake = [weak = weak_from_this(), io = &w_.io()] {
    asio::post(*io, [weak] {
      if (auto self = weak.lock()) self->wake_hold();
    });
  };
  auto entry = w_.pending().hold(std::move(req), std::move(wake), admit);
  if (entry) {
    // The held event: the monitor and /v1/decisions?follow=1 see it now.
    auto event = copy_record(rec);
    event.hold = "held";
    event.verdict = policy::Verdict::deny;
    event.reason = policy::Reason::not_allowlisted;
    mark_decided(event);
    emit(std::move(event));
  }
  return entry;
}

asio::awaitable<Session::Held> Session::hold(const http::Authority& target, RequestLine* req,
                                             decision_log::DecisionRecord& rec,
                                             std::shared_ptr<const policy::Snapshot>& snap,
                                             policy::Decision& d, Outcome& o) {
  auto& table = w_.pending();
  runtime::PendingTable::Admit admit;
  auto entry = enter_hold(target, rec, admit);
  if (!entry) {
    if (admit == runtime::PendingTable::Admit::off) {  // turned off meanwhile: as usual
      o = explain(std::move(d), target.display());
    } else {
      const auto s = table.settings();
      const bool client = admit == runtime::PendingTable::Admit::client_full;
      o = unheld(std::move(d), target.display(), client ? Unheld::client_full : Unheld::table_full,
                 client ? s.max_per_client : s.max_total);
    }
    co_return Held::refused;
  }

  // Held since the table took it, the instant its deadline counts from: held_ms is never
  // short of the time limit when it expires.
  const auto deadline = entry->request().deadline;
  const auto started = deadline - entry->request().timeout;
  hold_ = std::make_unique<HoldState>(w_.io());
  hold_->entry = entry;
  release_client_bytes();  // a CONNECT keeps no head buffer while it waits
  watch_client();
  set_deadline(
      Phase::held,
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - started) + kHoldGrace);

  auto seen = snap->generation;
  bool released = false, gone = false;
  Unheld how = Unheld::expired;
  for (;;) {
    if (closed_ || hold_->gone) {
      gone = true;
      break;
    }
    if (const auto e = entry->ended(); e != runtime::HoldEnd::none) {
      how = unheld_from(e);
      break;
    }
    if (w_.draining()) {
      how = Unheld::shutdown;
      break;
    }
    if (auto now_snap = w_.snapshot(); now_snap->generation != seen) {
      seen = now_snap->generation;
      auto again = decide(target, req, *now_snap, nullptr);
      if (again.verdict == policy::Verdict::allow ||
          again.reason != policy::Reason::not_allowlisted) {
        snap = std::move(now_snap);
        d = std::move(again);  // its rule views *snap
        released = true;
        break;
      }
    }
    const auto now = clock::now();
    if (now >= deadline) break;  // expired
    auto next = deadline;
    if (hold_->bytes_waiting) {
      if (client_hung_up()) {
        gone = true;
        break;
      }
      next = std::min(deadline, now + kHangupPoll);
    }
    hold_->timer.expires_at(next);
    asio::error_code ec;
    co_await hold_->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  end_hold();
  hold_.reset();
  asio::error_code ignored;
  if (!closed_) client_.cancel(ignored);  // the watch
  const auto waited = clock::now() - started;
  rec.held_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(waited).count());
  // The outcome is a decision of its own, made now: its time and latency count from here.
  rec.ts_us = decision_log::now_us();
  const auto current = w_.snapshot();
  rec.gen = released ? snap->generation : current->generation;
  rec.mode = released ? snap->rules.mode : current->rules.mode;
  if (released) {
    rec.hold = "released";
    set_deadline(Phase::busy, w_.cfg().idle_timeout);
    co_return Held::released;
  }
  if (gone) {
    rec.hold = "gone";
    rec.verdict = policy::Verdict::deny;
    rec.reason = policy::Reason::not_allowlisted;
    rec.detail = "the client went away while held";
    mark_decided(rec);
    emit(std::move(rec));
    close_all();
    co_return Held::gone;
  }
  rec.hold = hold_text(how);
  o = unheld(std::move(d), target.display(), how,
             static_cast<std::uint64_t>(entry->request().timeout.count()));
  set_deadline(Phase::busy, w_.cfg().idle_timeout);
  co_return Held::refused;
}

}  // namespace vibepit::proxy
