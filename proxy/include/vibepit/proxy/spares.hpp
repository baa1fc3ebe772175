#pragma once
// Buffers that the requests on one worker use in turn. A request takes one (a header index,
// the text of a rewritten head) and gives it back when it ends, capacity and all, so the
// next request does not go to the allocator for it. A keep-alive request used to make ten
// allocations; malloc and free were 5% of the proxy's samples at saturation.
//
// Bounded: at most `max_spare` are kept, and none that grew past `max_capacity` elements (a
// rare huge head is freed, not hoarded). A connection between requests holds none. One
// worker's thread only: no locks.
#include <cstddef>
#include <utility>
#include <vector>

namespace vibepit::proxy {

template <typename T>
class Spares {
 public:
  Spares(std::size_t max_spare, std::size_t max_capacity)
      : max_spare_(max_spare), max_capacity_(max_capacity) {
    spare_.reserve(max_spare);
  }

  // A spare one, empty, or a new empty one when none is left.
  T take() {
    if (spare_.empty()) return T{};
    T v = std::move(spare_.back());
    spare_.pop_back();
    return v;
  }

  // Keep `v`'s memory for the next take(), within the bounds.
  void give(T v) {
    if (v.capacity() == 0 || v.capacity() > max_capacity_ || spare_.size() >= max_spare_) return;
    v.clear();
    spare_.push_back(std::move(v));
  }

  std::size_t size() const { return spare_.size(); }

 private:
  std::size_t max_spare_;
  std::size_t max_capacity_;
  std::vector<T> spare_;
};

// `slot` holds a spare from `spares` for as long as this lives, then it goes back.
// Declare it after `slot`, so that it ends first.
template <typename T>
class Lease {
 public:
  Lease(Spares<T>& spares, T& slot) : spares_(spares), slot_(slot) { slot_ = spares_.take(); }
  ~Lease() { spares_.give(std::exchange(slot_, T{})); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

 private:
  Spares<T>& spares_;
  T& slot_;
};

}  // namespace vibepit::proxy
