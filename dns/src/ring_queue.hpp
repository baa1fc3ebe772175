#pragma once
// A FIFO queue in one buffer that keeps its capacity: once it has grown to what the load
// needs, pushing and popping allocate nothing (std::deque allocates a block every few
// dozen pushes and frees one as often). Grows by doubling; never shrinks.
#include <cstddef>
#include <utility>
#include <vector>

namespace vibepit::dns {

template <class T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  T& front() { return buf_[head_]; }
  const T& front() const { return buf_[head_]; }
  void pop_front() {
    head_ = head_ + 1 == buf_.size() ? 0 : head_ + 1;
    --size_;
  }
  void push_back(T v) {
    if (size_ == buf_.size()) grow();
    std::size_t at = head_ + size_;
    if (at >= buf_.size()) at -= buf_.size();
    buf_[at] = std::move(v);
    ++size_;
  }

 private:
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 16 : buf_.size() * 2);
    for (std::size_t i = 0; i < size_; ++i) {
      std::size_t at = head_ + i;
      if (at >= buf_.size()) at -= buf_.size();
      bigger[i] = std::move(buf_[at]);
    }
    buf_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> buf_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace vibepit::dns
