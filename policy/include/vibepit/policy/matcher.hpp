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
  // The plain rule (no methods or path) that matches, or nullptr.
  const HttpRule* match(std::string_view host, std::uint16_t port) const;
  // The first rule with methods and a path that names host:port (it is then inspected),
  // or nullptr.
  const HttpRule* inspection_rule(std::string_view host, std::uint16_t port) const;
  // The first rule with methods and a path that allows this request (`path` as
  // normalize_path gives it), or nullptr.
  const HttpRule* match_request(std::string_view host, std::uint16_t port, std::string_view method,
                                std::string_view path) const;
  std::size_t size() const { return plain_.count + requests_.count; }

 private:
  // Several rules may share one name (port globs, paths), so each key holds a short list.
  struct Entry {
    HttpRule rule;
    std::size_t seq;  // insertion order: among several matches, the first added wins
  };
  using Map = CowNameMap<std::vector<Entry>>;
  // A rule is filed under its name, or its canonical IP text, in one of the two maps.
  struct Rules {
    Map exact;                   // names and canonical IP text
    Map suffix;                  // key: the suffix after "*."
    detail::LabelWindow window;  // label counts of the suffix keys
    std::size_t count = 0;
    bool empty() const { return count == 0; }
    // The first rule, in insertion order (an exact name before any wildcard), that names
    // `host` and passes `pred`.
    template <class Pred>
    const HttpRule* first(std::string_view host, Pred&& pred) const;
  };
  static std::string key_of(const HttpRule& rule);
  static bool in_suffixes(const HttpRule& rule) {
    return rule.kind == HttpRule::Kind::domain && rule.domain.wildcard;
  }
  Rules& rules_for(const HttpRule& rule) { return rule.request ? requests_ : plain_; }
  const Rules& rules_for(const HttpRule& rule) const { return rule.request ? requests_ : plain_; }

  Rules plain_;     // DOMAIN:PORT
  Rules requests_;  // DOMAIN:PORT METHODS PATH
  std::size_t seq_ = 0;
};

}  // namespace vibepit::policy
