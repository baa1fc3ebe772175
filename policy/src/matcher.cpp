// Matching walks the query name label by label and probes two hashes, so its cost depends
// on the depth of the name, never on the number of rules.
#include "vibepit/policy/matcher.hpp"

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

bool DnsMatcher::add(DnsRule rule) {
  auto& map = rule.domain.wildcard ? suffix_ : exact_;
  if (map.find(rule.domain.name) != map.end()) return false;
  std::string key = rule.domain.name;
  if (rule.domain.wildcard) widen(window_, key);
  map.emplace(std::move(key), Entry{std::move(rule), count_});
  ++count_;
  return true;
}

const DnsRule* DnsMatcher::match(std::string_view name) const {
  if (auto it = exact_.find(name); it != exact_.end()) return &it->second.rule;
  if (suffix_.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(name, window_, [&](std::string_view suffix) {
    auto it = suffix_.find(suffix);
    if (it != suffix_.end() && (best == nullptr || it->second.seq < best->seq)) {
      best = &it->second;
    }
  });
  return best == nullptr ? nullptr : &best->rule;
}

bool HttpMatcher::add_to(detail::NameMap<std::vector<Entry>>& map, std::string key, HttpRule rule,
                         std::size_t seq) {
  auto& globs = map[std::move(key)];
  for (const auto& e : globs) {
    if (e.rule.port_glob == rule.port_glob) return false;
  }
  globs.push_back(Entry{std::move(rule), seq});
  return true;
}

bool HttpMatcher::add(HttpRule rule) {
  bool added = false;
  if (rule.kind == HttpRule::Kind::ip) {
    std::string key = rule.ip.to_string();
    added = add_to(exact_, std::move(key), std::move(rule), count_);
  } else {
    std::string key = rule.domain.name;
    bool wildcard = rule.domain.wildcard;
    if (wildcard) widen(window_, key);  // harmless even when the rule turns out a duplicate
    added = add_to(wildcard ? suffix_ : exact_, std::move(key), std::move(rule), count_);
  }
  if (added) ++count_;
  return added;
}

const HttpRule* HttpMatcher::match(std::string_view host, std::uint16_t port) const {
  // An exact name beats any wildcard; within one name the globs are in insertion order.
  if (auto it = exact_.find(host); it != exact_.end()) {
    for (const auto& e : it->second) {
      if (port_glob_matches(e.rule.port_glob, port)) return &e.rule;
    }
  }
  if (suffix_.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(host, window_, [&](std::string_view suffix) {
    auto it = suffix_.find(suffix);
    if (it == suffix_.end()) return;
    for (const auto& e : it->second) {
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
