#include "worker.hpp"

#include <thread>

namespace vibepit::bench {

namespace {
// Granularity of --timeout and of the reaction to signals and hard stops.
constexpr auto kSweepInterval = std::chrono::milliseconds(50);
}  // namespace

Conn::Conn(Worker& w) : worker_(w), sock_(w.ioc()) {
  w.attach(this);
}

Conn::Conn(Worker& w, tcp::socket&& s) : worker_(w), sock_(std::move(s)) {
  w.attach(this);
}

Conn::~Conn() {
  worker_.detach(this);
}

void Conn::close() {
  asio::error_code ec;
  sock_.close(ec);
}

Worker::Worker(std::size_t index)
    : index_(index),
      ioc_(std::make_unique<asio::io_context>(1)),
      sweep_timer_(std::make_unique<asio::steady_timer>(*ioc_)) {}

Worker::~Worker() {
  sweep_timer_.reset();
  ioc_.reset();
}

void Worker::attach(Conn* c) {
  c->next_ = head_;
  if (head_) head_->prev_ = c;
  head_ = c;
  ++live_;
  // A connection born after the stop is closed at once.
  if (stopping_) c->close();
}

void Worker::detach(Conn* c) {
  if (c->prev_) c->prev_->next_ = c->next_;
  if (c->next_) c->next_->prev_ = c->prev_;
  if (head_ == c) head_ = c->next_;
  --live_;
}

void Worker::spawn(asio::awaitable<void> task) {
  ++tasks_;
  asio::co_spawn(*ioc_, std::move(task), [this](std::exception_ptr e) {
    if (e) ++task_failures_;
    if (--tasks_ == 0) sweep_timer_->cancel();
  });
}

void Worker::stop_now() {
  stopping_ = true;
  for (auto& hook : stop_hooks_) hook();
  stop_hooks_.clear();
}

asio::awaitable<void> Worker::sweep() {
  for (;;) {
    auto now = Clock::now();
    if (!stopping_ && (now >= hard_stop_ || stop_requested())) stop_now();
    for (Conn* c = head_; c; c = c->next_) {
      if (stopping_) {
        c->close();
      } else if (c->deadline_ <= now && c->sock_.is_open()) {
        c->timed_out_ = true;
        c->close();
      }
    }
    if (tasks_ == 0 && (!keep_alive_ || stopping_)) break;
    asio::error_code ec;
    sweep_timer_->expires_after(kSweepInterval);
    co_await sweep_timer_->async_wait(with_ec(ec));
  }
}

void Worker::run(Clock::time_point limit) {
  ioc_->restart();
  stopping_ = false;
  asio::co_spawn(*ioc_, sweep(), asio::detached);
  ioc_->run_until(limit);
}

Workers make_workers(std::size_t n) {
  Workers ws;
  for (std::size_t i = 0; i < n; ++i) ws.push_back(std::make_unique<Worker>(i));
  return ws;
}

void run_workers(Workers& ws, Clock::time_point limit) {
  std::vector<std::thread> threads;
  for (std::size_t i = 1; i < ws.size(); ++i)
    threads.emplace_back([&w = *ws[i], limit] { w.run(limit); });
  ws[0]->run(limit);
  for (auto& t : threads) t.join();
}

asio::awaitable<void> sleep_until(Worker& w, Clock::time_point t) {
  asio::steady_timer timer(w.ioc(), t);
  asio::error_code ec;
  co_await timer.async_wait(with_ec(ec));
}

}  // namespace vibepit::bench
