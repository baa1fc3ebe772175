// Matching walks the query name label by label and probes two hashes, so its cost depends
// on the depth of the name, never on the number of rules.
#include "vibepit/policy/matcher.hpp"

namespace vibepit::policy {
namespace {

// Calls f(suffix) for every suffix that follows a dot, longest first: for "a.b.example.com"
// that is "b.example.com", "example.com", "com". The names are normalised by the caller
// (decide_* validates them), so no empty label reaches this walk.
template <class F>
void for_each_suffix(std::string_view name, F&& f) {
  for (auto dot = name.find('.'); dot != std::string_view::npos; dot = name.find('.', dot + 1)) {
    f(name.substr(dot + 1));
  }
}

}  // namespace

bool DnsMatcher::add(DnsRule rule) {
  auto& map = rule.domain.wildcard ? suffix_ : exact_;
  if (map.find(rule.domain.name) != map.end()) return false;
  std::string key = rule.domain.name;
  map.emplace(std::move(key), Entry{std::move(rule), count_});
  ++count_;
  return true;
}

const DnsRule* DnsMatcher::match(std::string_view name) const {
  if (auto it = exact_.find(name); it != exact_.end()) return &it->second.rule;
  if (suffix_.empty()) return nullptr;
  const Entry* best = nullptr;
  for_each_suffix(name, [&](std::string_view suffix) {
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
    added =
        add_to(rule.domain.wildcard ? suffix_ : exact_, std::move(key), std::move(rule), count_);
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
  for_each_suffix(host, [&](std::string_view suffix) {
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
