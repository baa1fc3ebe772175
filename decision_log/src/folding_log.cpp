#include "vibepit/decision_log/folding_log.hpp"

#include <utility>

namespace vibepit::decision_log {

FoldingLog::FoldingLog(asio::io_context& io, DecisionLog::Producer& producer,
                       std::uint32_t per_client)
    : producer_(producer),
      folder_(per_client, [&producer](DecisionRecord&& r) { producer.push(std::move(r)); }),
      timer_(io) {}

void FoldingLog::write(DecisionRecord&& rec, const policy::IpAddr& client, clock::time_point now) {
  // Held requests are bounded by ask-max: their events and outcomes are never folded, so the
  // monitor sees each one.
  if (rec.verdict == policy::Verdict::deny && !rec.close && !rec.hold &&
      !folder_.admit(rec, client, now)) {
    keep_buffers(rec);
    arm();
    return;
  }
  producer_.push(std::move(rec));
}

void FoldingLog::fold(DecisionRecord&& rec, const policy::IpAddr& client, clock::time_point now) {
  folder_.fold(rec, client, now);
  keep_buffers(rec);
  arm();
}

void FoldingLog::keep_buffers(DecisionRecord& rec) {
  // The first folded record of an interval is kept whole (its summary); the others are
  // dropped here, and their buffers serve the next record on this thread.
  kept_.take(rec);
}

void FoldingLog::reuse_buffers(DecisionRecord& rec) {
  if (kept_.empty()) return producer_.reuse_buffers(rec);
  kept_.give(rec);
}

void FoldingLog::flush() {
  folder_.flush(clock::now(), true);
  timer_.cancel();
  armed_ = false;
}

void FoldingLog::arm() {
  if (armed_ || !folder_.pending()) return;
  armed_ = true;
  timer_.expires_at(folder_.due());
  // Destroying the timer cancels the wait: the handler then returns without touching this.
  timer_.async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    armed_ = false;
    folder_.flush(clock::now(), true);
  });
}

}  // namespace vibepit::decision_log
