#pragma once
// Rule matching whose cost does not grow with the number of rules: a hash of exact names
// plus a hash of wildcard suffixes, walked label by label from the query name. The hashes
// are copy-on-write (cow.hpp): a copy of a matcher shares them, and adding a rule to it
// copies one shard of one hash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/cow.hpp"
#include "vibepit/policy/rules.hpp"

namespace vibepit::policy {

namespace detail {
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
  bool contains(const DnsRule& rule) const;  // an equal rule is present
  // Room for these rules before they are added one by one (compiling a whole list).
  void reserve_for(const std::vector<DnsRule>& rules);
  // `name` must already be normalised (normalize_name). nullptr when nothing matches.
  const DnsRule* match(std::string_view name) const;
  std::size_t size() const { return count_; }

 private:
  struct Entry {
    DnsRule rule;
    std::size_t seq;  // insertion order: among several wildcards, the first added wins
  };
  CowNameMap<Entry> exact_;
  CowNameMap<Entry> suffix_;    // key: the suffix after "*."
  detail::LabelWindow window_;  // label counts of the suffix keys
  std::size_t count_ = 0;
};

class HttpMatcher {
 public:
  bool add(HttpRule rule);
  bool contains(const HttpRule& rule) const;  // an equal rule is present
  // Room for these rules before they are added one by one (compiling a whole list).
  void reserve_for(const std::vector<HttpRule>& rules);
  // `host` is a normalised name or canonical IP text (IpAddr::to_string, no brackets).
  const HttpRule* match(std::string_view host, std::uint16_t port) const;
  std::size_t size() const { return count_; }

 private:
  // Several port globs may share one name, so each key holds a short list.
  struct Entry {
    HttpRule rule;
    std::size_t seq;  // insertion order: among several matches, the first added wins
  };
  using Map = CowNameMap<std::vector<Entry>>;
  // A rule is filed under its name, or its canonical IP text, in one of the two maps.
  static std::string key_of(const HttpRule& rule);
  static bool in_suffixes(const HttpRule& rule) {
    return rule.kind == HttpRule::Kind::domain && rule.domain.wildcard;
  }
  Map exact_;                   // names and canonical IP text
  Map suffix_;                  // key: the suffix after "*."
  detail::LabelWindow window_;  // label counts of the suffix keys
  std::size_t count_ = 0;
};

}  // namespace vibepit::policy
