#pragma once
// Engine work on a thread of its own, beside the caller's: the engine takes its time over
// each network and container, and two that do not depend on one another need not wait in
// turn. The thread has a client of its own.
#include <exception>
#include <thread>
#include <utility>

#include "vibepit/docker/client.hpp"

namespace vibepit::launcher {

class Beside {
 public:
  // Starts fn(client) with a copy of `docker`.
  template <typename Fn>
  Beside(const docker::Client& docker, Fn fn)
      : thread_([this, fn = std::move(fn), client = docker]() mutable {
          try {
            fn(client);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  // Waits for it, and throws what it threw. Destroyed without join() (the caller is
  // unwinding from an error of its own), it still waits, and drops its error.
  void join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::jthread thread_;  // after error_, which it may set
};

}  // namespace vibepit::launcher
