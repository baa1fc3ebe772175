// CONNECT: one decision, one dial, then the tunnel. The record of the decision is written
// before the first byte moves; a second record, written when the tunnel closes, carries
// its byte counts and duration.
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "vibepit/proxy/relay.hpp"
#include "vibepit/proxy/session.hpp"

namespace vibepit::proxy {

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
  const auto started = Session::clock::now();
  RelayStats stats;
  if (co_await s.send("HTTP/1.1 200 Connection established\r\n\r\n")) {
    asio::error_code ec;
    ByteBuffer& early = s.client_bytes();  // bytes the client sent ahead of our 200
    if (!early.empty()) {
      co_await asio::async_write(s.upstream(), asio::buffer(early.data(), early.size()),
                                 asio::redirect_error(asio::use_awaitable, ec));
      stats.up += early.size();
      early.clear();
    }
    s.release_client_bytes();  // an idle tunnel keeps no head buffer
    if (!ec) {
      s.touch();
      co_await relay(
          s.client(), s.upstream(), s.cfg().splice == config::SpliceMode::automatic,
          [&s] { s.touch(); }, stats);
    }
  }
  rec.bytes_up = stats.up;
  rec.bytes_down = stats.down;
  s.emit_close(std::move(rec), started);
}

}  // namespace vibepit::proxy
