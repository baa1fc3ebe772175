// CONNECT: one decision, one dial, then the tunnel. The record of the decision is written
// before the first byte moves; a second record, written when the tunnel closes, carries
// its byte counts and duration. The client's first bytes pass the SNI check
// (tunnel_check.hpp) before any reaches upstream: the dial was made before the 200, so the
// check waits for nothing but the client. A tunnel it refuses gets a deny record (same id,
// reason sni_mismatch, no_sni, not_tls or bad_client_hello) and is closed.
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/proxy/relay.hpp"
#include "vibepit/proxy/session.hpp"
#include "vibepit/proxy/tunnel_check.hpp"

namespace vibepit::proxy {

// Not in the tunnel's frame, where a second record would take it toward Asio's recycling
// limit.
void record_refusal(Session& s, const TunnelCheck& check, decision_log::DecisionRecord& rec) {
  check.fill(rec);
  auto deny = s.copy_record(rec);
  deny.status = 0;       // the 200 went before; the tunnel is closed, not answered
  s.mark_decided(deny);  // elapsed_us: arrival to this verdict
  deny.ts_us = decision_log::now_us();
  s.emit(std::move(deny));
}

asio::awaitable<void> tunnel(Session& s, const http::Authority& target,
                             decision_log::DecisionRecord& rec) {
  auto dial = co_await s.decide_and_dial(target, rec, false);
  s.mark_decided(rec);
  if (s.closed()) co_return;
  if (!dial.ok) {
    s.emit(std::move(rec));
    co_await s.refuse(dial.status, dial.error, dial.message, true);
    co_return;
  }
  rec.status = 200;
  s.emit(s.copy_record(rec));  // the decision now; `rec` goes on to be the close record
  if (dial.inspect) {
    co_await inspect(s, target, rec);
    co_return;
  }
  const auto started = Session::clock::now();
  RelayStats stats;
  TunnelCheck check(s.cfg().tunnel_tls, target.host, s.cfg().header_timeout);
  if (co_await s.send("HTTP/1.1 200 Connection established\r\n\r\n")) {
    asio::error_code ec;
    ByteBuffer& early = s.client_bytes();  // bytes the client sent ahead of our 200
    if (!early.empty()) {
      // The first offer holds nothing yet: on a pass, these bytes are all there is to send.
      const auto step = check.offer(early.view());
      if (step == TunnelCheck::Step::pass) {
        co_await asio::async_write(s.upstream(), asio::buffer(early.data(), early.size()),
                                   asio::redirect_error(asio::use_awaitable, ec));
        stats.up += early.size();
      }
      early.clear();
    }
    s.release_client_bytes();  // an idle tunnel keeps no head buffer
    if (check.refused()) {
      if (!check.alert().empty()) co_await s.send(check.alert());
    } else if (!ec) {
      s.touch();
      co_await relay(
          s.client(), s.upstream(), s.cfg().splice == config::SpliceMode::automatic,
          [&s] { s.touch(); }, stats, check.pending() ? &check : nullptr);
    }
  }
  if (check.refused()) record_refusal(s, check, rec);
  rec.bytes_up = stats.up;
  rec.bytes_down = stats.down;
  s.emit_close(std::move(rec), started);
}

}  // namespace vibepit::proxy
