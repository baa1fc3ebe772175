#include "vibepit/runtime/pending.hpp"

#include <utility>

namespace vibepit::runtime {

PendingTable::PendingTable(config::AskConfig settings)
    : settings_(settings), asking_(settings.enabled) {}

std::shared_ptr<PendingTable::Entry> PendingTable::hold(PendingRequest req, Wake wake,
                                                        Admit& admit) {
  std::lock_guard lock(mu_);
  if (closed_ || !settings_.enabled) {
    admit = Admit::off;
    return nullptr;
  }
  if (held_.size() >= settings_.max_total) {
    admit = Admit::table_full;
    return nullptr;
  }
  auto& mine = per_client_[req.client_ip];
  if (mine >= settings_.max_per_client) {
    if (mine == 0) per_client_.erase(req.client_ip);
    admit = Admit::client_full;
    return nullptr;
  }
  auto e = std::make_shared<Entry>();
  req.timeout = settings_.timeout;
  req.deadline = std::chrono::steady_clock::now() + req.timeout;
  e->req_ = std::move(req);
  e->wake_ = std::move(wake);
  ++mine;
  held_.insert_or_assign(e->req_.id, e);
  admit = Admit::held;
  return e;
}

void PendingTable::remove_locked(Entry& e) {
  if (!e.in_table_) return;
  e.in_table_ = false;
  held_.erase(e.req_.id);
  auto it = per_client_.find(e.req_.client_ip);
  if (it != per_client_.end() && --it->second == 0) per_client_.erase(it);
}

void PendingTable::Entry::wake() {
  std::lock_guard lock(wake_mu_);
  if (wake_) wake_();
}

void PendingTable::leave(Entry& e) {
  {
    std::lock_guard lock(mu_);
    remove_locked(e);
  }
  std::lock_guard lock(e.wake_mu_);  // waits for a wake in progress
  e.wake_ = nullptr;
}

void PendingTable::wake_each(const std::vector<std::shared_ptr<Entry>>& entries) {
  for (const auto& e : entries) e->wake();
}

void PendingTable::rules_changed() {
  std::vector<std::shared_ptr<Entry>> woken;
  {
    std::lock_guard lock(mu_);
    woken.reserve(held_.size());
    for (const auto& [id, e] : held_) woken.push_back(e);
  }
  wake_each(woken);
}

std::vector<std::shared_ptr<PendingTable::Entry>> PendingTable::end_locked(HoldEnd why) {
  std::vector<std::shared_ptr<Entry>> ended;
  ended.reserve(held_.size());
  for (auto it = held_.begin(); it != held_.end();) {
    auto e = (it++)->second;  // remove_locked erases the node `it` was at
    e->end_.store(why, std::memory_order_release);
    remove_locked(*e);
    ended.push_back(std::move(e));
  }
  return ended;
}

bool PendingTable::refuse(std::uint64_t id) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(id);
    if (it == held_.end()) return false;
    e = it->second;
    e->end_.store(HoldEnd::refused, std::memory_order_release);
    remove_locked(*e);
  }
  e->wake();
  return true;
}

std::size_t PendingTable::end_all(HoldEnd why) {
  std::vector<std::shared_ptr<Entry>> ended;
  {
    std::lock_guard lock(mu_);
    if (why == HoldEnd::shutdown) {
      closed_ = true;
      asking_.store(false, std::memory_order_relaxed);
    }
    ended = end_locked(why);
  }
  wake_each(ended);
  return ended.size();
}

config::AskConfig PendingTable::settings() const {
  std::lock_guard lock(mu_);
  return settings_;
}

void PendingTable::set_settings(const config::AskConfig& s) {
  std::vector<std::shared_ptr<Entry>> ended;
  {
    std::lock_guard lock(mu_);
    settings_ = s;
    asking_.store(s.enabled && !closed_, std::memory_order_relaxed);
    if (!s.enabled) ended = end_locked(HoldEnd::ask_off);
  }
  wake_each(ended);
}

std::vector<PendingRequest> PendingTable::list() const {
  std::lock_guard lock(mu_);
  std::vector<PendingRequest> out;
  out.reserve(held_.size());
  for (const auto& [id, e] : held_) out.push_back(e->req_);
  return out;
}

std::size_t PendingTable::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace vibepit::runtime
