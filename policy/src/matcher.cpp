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
  const auto* globs = (in_suffixes(rule) ? suffix_ : exact_).find(key_of(rule));
  if (globs == nullptr) return false;
  for (const auto& e : *globs) {
    if (e.rule.port_glob == rule.port_glob) return true;
  }
  return false;
}

void HttpMatcher::reserve_for(const std::vector<HttpRule>& rules) {
  // Keys, not rules: several port globs of one name share a key, so this may overshoot.
  const auto wild =
      static_cast<std::size_t>(std::count_if(rules.begin(), rules.end(), in_suffixes));
  exact_.reserve(rules.size() - wild);
  suffix_.reserve(wild);
}

bool HttpMatcher::add(HttpRule rule) {
  if (contains(rule)) return false;  // probed first: a duplicate leaves every shard shared
  std::string key = key_of(rule);
  const bool wildcard = in_suffixes(rule);
  if (wildcard) widen(window_, key);
  bool inserted = false;
  auto& globs = (wildcard ? suffix_ : exact_).get_or_insert(std::move(key), inserted);
  globs.push_back(Entry{std::move(rule), count_});
  ++count_;
  return true;
}

const HttpRule* HttpMatcher::match(std::string_view host, std::uint16_t port) const {
  // An exact name beats any wildcard; within one name the globs are in insertion order.
  if (const auto* globs = exact_.find(host)) {
    for (const auto& e : *globs) {
      if (port_glob_matches(e.rule.port_glob, port)) return &e.rule;
    }
  }
  if (suffix_.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(host, window_, [&](std::string_view suffix) {
    const auto* globs = suffix_.find(suffix);
    if (globs == nullptr) return;
    for (const auto& e : *globs) {
      if (best != nullptr && e.seq >= best->seq) break;
      if (port_glob_matches(e.rule.port_glob, port)) {
        best = &e;
        break;
      }
    }
  });
  return best == nullptr ? nullptr : &best->rule;
}

}  // namespace vibepit::policy
