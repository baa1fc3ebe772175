#pragma once
// A token bucket: `rate` tokens a second accrue, at most `burst` are held, each admitted
// event takes one. A new bucket is full. Not thread-safe: one per thread or per client.
#include <algorithm>
#include <chrono>

namespace vibepit::runtime {

class TokenBucket {
 public:
  using clock = std::chrono::steady_clock;

  TokenBucket(double burst, clock::time_point now) : tokens_(burst), last_(now) {}

  // Refills for the time since the last call, then takes a token if one is there.
  bool take(double rate, double burst, clock::time_point now) {
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    tokens_ = std::min(burst, tokens_ + elapsed * rate);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

  clock::time_point last() const { return last_; }

 private:
  double tokens_;
  clock::time_point last_;
};

}  // namespace vibepit::runtime
