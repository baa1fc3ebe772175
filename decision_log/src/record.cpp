#include "vibepit/decision_log/record.hpp"

#include <chrono>
#include <utility>

namespace vibepit::decision_log {

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

bool keepable(const std::string& s) {
  return s.capacity() > std::string().capacity() && s.capacity() <= RecordBuffers::kTextMax;
}

template <typename T>
bool take_larger(T& from, T& held, bool keep) {
  if (!keep || from.capacity() <= held.capacity()) return false;
  std::swap(from, held);
  return true;
}

template <typename T>
void give_emptied(T& held, T& to) {
  to = std::move(held);
  to.clear();
  held = T();
}

}  // namespace

bool RecordBuffers::take(DecisionRecord& r) {
  bool took = take_larger(r.host, host, keepable(r.host));
  took |= take_larger(r.rule, rule, keepable(r.rule));
  took |= take_larger(r.addr, addr, keepable(r.addr));
  took |= take_larger(r.addrs, addrs, r.addrs.capacity() <= kAddrsMax);
  return took;
}

void RecordBuffers::give(DecisionRecord& r) {
  give_emptied(host, r.host);
  give_emptied(rule, r.rule);
  give_emptied(addr, r.addr);
  give_emptied(addrs, r.addrs);
}

bool RecordBuffers::empty() const {
  const std::size_t inline_text = std::string().capacity();
  return host.capacity() <= inline_text && rule.capacity() <= inline_text &&
         addr.capacity() <= inline_text && addrs.capacity() == 0;
}

}  // namespace vibepit::decision_log
