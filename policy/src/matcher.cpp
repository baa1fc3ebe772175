// Matching walks the query name label by label and probes two hashes, so its cost depends
// on the depth of the name, never on the number of rules.
#include "vibepit/policy/matcher.hpp"

#include <algorithm>

namespace vibepit::policy {
namespace {

std::size_t label_count(std::string_view name) {
  std::size_t n = 1;
  for (char c : name) n += c == '.' ? 1 : 0;
  return n;
}

void widen(detail::LabelWindow& w, std::string_view key) {
  std::size_t n = label_count(key);
  if (n < w.min) w.min = n;
  if (n > w.max) w.max = n;
}

// Calls f(suffix) for every suffix that follows a dot, longest first: for "a.b.example.com"
// that is "b.example.com", "example.com", "com". Suffixes with more or fewer labels than
// any wildcard key are skipped without hashing. The names are normalised by the caller
// (decide_* validates them), so no empty label reaches this walk.
template <class F>
void for_each_suffix(std::string_view name, const detail::LabelWindow& w, F&& f) {
  std::size_t labels = label_count(name);
  for (auto dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.', dot + 1)) {
    std::size_t n = --labels;  // labels in the suffix after this dot
    if (n > w.max) continue;
    if (n < w.min) break;
    f(name.substr(dot + 1));
  }
}

}  // namespace

bool DnsMatcher::contains(const DnsRule& rule) const {
  return (rule.domain.wildcard ? suffix_ : exact_).find(rule.domain.name) != nullptr;
}

void DnsMatcher::reserve_for(const std::vector<DnsRule>& rules) {
  const auto wild = static_cast<std::size_t>(std::count_if(
      rules.begin(), rules.end(), [](const DnsRule& r) { return r.domain.wildcard; }));
  exact_.reserve(rules.size() - wild);
  suffix_.reserve(wild);
}

bool DnsMatcher::add(DnsRule rule) {
  if (contains(rule)) return false;  // probed first: a duplicate leaves every shard shared
  const bool wildcard = rule.domain.wildcard;
  std::string key = rule.domain.name;
  if (wildcard) widen(window_, key);
  bool inserted = false;
  (wildcard ? suffix_ : exact_).get_or_insert(std::move(key), inserted) =
      Entry{std::move(rule), count_};
  ++count_;
  return true;
}

const DnsRule* DnsMatcher::match(std::string_view name) const {
  if (const Entry* e = exact_.find(name)) return &e->rule;
  if (suffix_.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(name, window_, [&](std::string_view suffix) {
    const Entry* e = suffix_.find(suffix);
    if (e != nullptr && (best == nullptr || e->seq < best->seq)) best = e;
  });
  return best == nullptr ? nullptr : &best->rule;
}

std::string HttpMatcher::key_of(const HttpRule& rule) {
  return rule.kind == HttpRule::Kind::ip ? rule.ip.to_string() : rule.domain.name;
}

bool HttpMatcher::contains(const HttpRule& rule) const {
  const Rules& r = rules_for(rule);
  const auto* list = (in_suffixes(rule) ? r.suffix : r.exact).find(key_of(rule));
  if (list == nullptr) return false;
  for (const auto& e : *list) {
    if (e.rule.text == rule.text) return true;  // the canonical text is the whole rule
  }
  return false;
}

void HttpMatcher::reserve_for(const std::vector<HttpRule>& rules) {
  // Keys, not rules: several rules of one name share a key, so this may overshoot.
  std::size_t wild = 0, wild_requests = 0, requests = 0;
  for (const auto& r : rules) {
    wild += in_suffixes(r) && !r.request ? 1 : 0;
    wild_requests += in_suffixes(r) && r.request ? 1 : 0;
    requests += r.request ? 1 : 0;
  }
  plain_.exact.reserve(rules.size() - requests - wild);
  plain_.suffix.reserve(wild);
  if (requests > 0) {
    requests_.exact.reserve(requests - wild_requests);
    requests_.suffix.reserve(wild_requests);
  }
}

bool HttpMatcher::add(HttpRule rule) {
  if (contains(rule)) return false;  // probed first: a duplicate leaves every shard shared
  Rules& r = rules_for(rule);
  std::string key = key_of(rule);
  const bool wildcard = in_suffixes(rule);
  if (wildcard) widen(r.window, key);
  bool inserted = false;
  auto& list = (wildcard ? r.suffix : r.exact).get_or_insert(std::move(key), inserted);
  list.push_back(Entry{std::move(rule), seq_++});
  ++r.count;
  return true;
}

template <class Pred>
const HttpRule* HttpMatcher::Rules::first(std::string_view host, Pred&& pred) const {
  // An exact name beats any wildcard; within one name the rules are in insertion order.
  if (const auto* list = exact.find(host)) {
    for (const auto& e : *list) {
      if (pred(e.rule)) return &e.rule;
    }
  }
  if (suffix.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(host, window, [&](std::string_view s) {
    const auto* list = suffix.find(s);
    if (list == nullptr) return;
    for (const auto& e : *list) {
      if (best != nullptr && e.seq >= best->seq) break;
      if (pred(e.rule)) {
        best = &e;
        break;
      }
    }
  });
  return best == nullptr ? nullptr : &best->rule;
}

const HttpRule* HttpMatcher::match(std::string_view host, std::uint16_t port) const {
  return plain_.first(host,
                      [&](const HttpRule& r) { return port_glob_matches(r.port_glob, port); });
}

const HttpRule* HttpMatcher::inspection_rule(std::string_view host, std::uint16_t port) const {
  if (requests_.empty()) return nullptr;
  return requests_.first(host,
                         [&](const HttpRule& r) { return port_glob_matches(r.port_glob, port); });
}

const HttpRule* HttpMatcher::match_request(std::string_view host, std::uint16_t port,
                                           std::string_view method, std::string_view path) const {
  if (requests_.empty()) return nullptr;
  return requests_.first(host, [&](const HttpRule& r) {
    return port_glob_matches(r.port_glob, port) && r.request->matches(method, path);
  });
}

}  // namespace vibepit::policy
