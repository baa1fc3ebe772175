#include "vibepit/decision_log/producer.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace vibepit::decision_log {

Producer::Producer(std::size_t capacity, WriterSignal& signal)
    : slots_(std::bit_ceil(std::max<std::size_t>(capacity, 2))),
      mask_(slots_.size() - 1),
      signal_(signal) {}

void Producer::push(DecisionRecord&& r) {
  auto head = head_.load(std::memory_order_relaxed);
  if (head - tail_.load(std::memory_order_acquire) >= slots_.size()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slots_[head & mask_] = std::move(r);
  head_.store(head + 1, std::memory_order_seq_cst);
  // A plain load while the writer is awake (it polls): no syscall on this path.
  if (signal_.asleep.load(std::memory_order_seq_cst) != 0) signal_.wake();
}

bool Producer::pop(DecisionRecord& out) {
  auto tail = tail_.load(std::memory_order_relaxed);
  if (tail == head_.load(std::memory_order_acquire)) return false;
  // Moved out through a temporary: a move assignment straight into `out` would hand out's
  // old string buffers to the slot, and every slot would keep heap memory while idle.
  out = DecisionRecord(std::move(slots_[tail & mask_]));
  tail_.store(tail + 1, std::memory_order_release);
  return true;
}

std::size_t Producer::waiting() const {
  return head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_relaxed);
}

bool Producer::empty() const {
  return head_.load(std::memory_order_seq_cst) == tail_.load(std::memory_order_relaxed);
}

void Producer::reuse_buffers(DecisionRecord& r) {
  const auto tail = spare_tail_.load(std::memory_order_relaxed);
  if (tail == spare_head_.load(std::memory_order_acquire)) return;  // none back yet
  spares_[tail % kSpares].give(r);
  spare_tail_.store(tail + 1, std::memory_order_release);
}

void Producer::give_back(DecisionRecord& r) {
  const auto head = spare_head_.load(std::memory_order_relaxed);
  if (head - spare_tail_.load(std::memory_order_acquire) >= kSpares) return;  // enough back
  // This slot's buffers went to a record (give() leaves it empty), or it never held any.
  if (!spares_[head % kSpares].take(r)) return;  // nothing worth keeping
  spare_head_.store(head + 1, std::memory_order_release);
}

std::uint64_t Producer::next_id() {
  if (id_next_ == id_end_) {
    id_next_ = signal_.take_id_block();
    id_end_ = id_next_ + WriterSignal::kIdBlock;
  }
  return id_next_++;
}

}  // namespace vibepit::decision_log
