// One io_context per thread, with a sweeper that enforces per-operation deadlines and the
// hard stop of a run. Connections register with their worker so the sweeper can close them.
#pragma once

#include "common.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace vibepit::bench {

class Worker;

// A socket owned by one worker. Only that worker's thread touches it.
class Conn {
 public:
  explicit Conn(Worker& w);
  Conn(Worker& w, tcp::socket&& s);
  ~Conn();
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  tcp::socket& socket() { return sock_; }
  Worker& worker() { return worker_; }
  // The sweeper closes the socket once `now + timeout` passes, until disarm().
  void arm(Clock::time_point now, Clock::duration timeout) { deadline_ = now + timeout; }
  void disarm() { deadline_ = Clock::time_point::max(); }
  bool timed_out() const { return timed_out_; }
  void close();

 private:
  friend class Worker;
  Worker& worker_;
  tcp::socket sock_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false;
  Conn* prev_ = nullptr;
  Conn* next_ = nullptr;
};

class Worker {
 public:
  explicit Worker(std::size_t index);
  // Destroys the context first so that pending tasks unwind while the worker is intact.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  asio::io_context& ioc() { return *ioc_; }
  std::size_t index() const { return index_; }

  // Runs a task on this worker; call from this worker's thread (or before run()).
  void spawn(asio::awaitable<void> task);
  // Every connection is closed at this time (end of a phase plus grace), or on a signal.
  void set_hard_stop(Clock::time_point t) { hard_stop_ = t; }
  // Keep running with no task until the hard stop (servers waiting for connections).
  void set_keep_alive(bool on) { keep_alive_ = on; }
  // Called once, on this worker's thread, when the hard stop is reached.
  void on_stop(std::function<void()> hook) { stop_hooks_.push_back(std::move(hook)); }
  bool stopping() const { return stopping_; }
  std::size_t live_connections() const { return live_; }
  std::uint64_t task_failures() const { return task_failures_; }

  // Restarts the context and runs it until every task finished, or `limit` at the latest.
  void run(Clock::time_point limit);

 private:
  friend class Conn;
  void attach(Conn* c);
  void detach(Conn* c);
  void stop_now();
  asio::awaitable<void> sweep();

  std::size_t index_;
  std::unique_ptr<asio::io_context> ioc_;
  std::unique_ptr<asio::steady_timer> sweep_timer_;
  Clock::time_point hard_stop_ = Clock::time_point::max();
  std::vector<std::function<void()>> stop_hooks_;
  Conn* head_ = nullptr;
  std::size_t live_ = 0;
  std::size_t tasks_ = 0;
  std::uint64_t task_failures_ = 0;
  bool keep_alive_ = false;
  bool stopping_ = false;
};

using Workers = std::vector<std::unique_ptr<Worker>>;

Workers make_workers(std::size_t n);
// Runs every worker on its own thread (the calling thread for worker 0) and joins them.
void run_workers(Workers& ws, Clock::time_point limit);

// Waits on the worker's loop until `t`: a back-off, or the pace of an offered load.
asio::awaitable<void> sleep_until(Worker& w, Clock::time_point t);

// An offered load (--rate): unit k, counted from 0 across every slot, starts no earlier
// than start + k / rate. A slot that falls behind starts its next unit at once, so the
// load stays closed-loop (at most one unit per slot in flight). rate 0: no pacing.
struct Pace {
  Clock::time_point start{};
  double rate = 0;
  Clock::time_point due(std::uint64_t k) const {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(static_cast<double>(k) / rate));
  }
};

// Error-as-value completion token: `co_await s.async_read_some(b, with_ec(ec))`.
inline auto with_ec(asio::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
}

}  // namespace vibepit::bench
