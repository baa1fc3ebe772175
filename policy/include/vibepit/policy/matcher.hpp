#pragma once
// Rule matching whose cost does not grow with the number of rules: a hash of exact names
// plus a hash of wildcard suffixes, walked label by label from the query name.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vibepit/policy/rules.hpp"

namespace vibepit::policy {

namespace detail {
// Lets the maps be probed with a string_view, so a lookup never builds a std::string.
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
template <class V>
using NameMap = std::unordered_map<std::string, V, NameHash, std::equal_to<>>;
// The fewest and most labels of any wildcard suffix: the walk probes only suffixes whose
// label count lies in between, which usually means one or two probes per query.
struct LabelWindow {
  std::size_t min = static_cast<std::size_t>(-1);
  std::size_t max = 0;
};
}  // namespace detail

class DnsMatcher {
 public:
  // Returns false (and changes nothing) when an equal rule is already present.
  bool add(DnsRule rule);
  // `name` must already be normalised (normalize_name). nullptr when nothing matches.
  const DnsRule* match(std::string_view name) const;
  std::size_t size() const { return count_; }

 private:
  struct Entry {
    DnsRule rule;
    std::size_t seq;  // insertion order: among several wildcards, the first added wins
  };
  detail::NameMap<Entry> exact_;
  detail::NameMap<Entry> suffix_;  // key: the suffix after "*."
  detail::LabelWindow window_;     // label counts of the suffix keys
  std::size_t count_ = 0;
};

class HttpMatcher {
 public:
  bool add(HttpRule rule);
  // `host` is a normalised name or canonical IP text (IpAddr::to_string, no brackets).
  const HttpRule* match(std::string_view host, std::uint16_t port) const;
  std::size_t size() const { return count_; }

 private:
  // Several port globs may share one name, so each key holds a short list.
  struct Entry {
    HttpRule rule;
    std::size_t seq;  // insertion order: among several matches, the first added wins
  };
  static bool add_to(detail::NameMap<std::vector<Entry>>& map, std::string key, HttpRule rule,
                     std::size_t seq);
  detail::NameMap<std::vector<Entry>> exact_;   // names and canonical IP text
  detail::NameMap<std::vector<Entry>> suffix_;  // key: the suffix after "*."
  detail::LabelWindow window_;                  // label counts of the suffix keys
  std::size_t count_ = 0;
};

}  // namespace vibepit::policy
