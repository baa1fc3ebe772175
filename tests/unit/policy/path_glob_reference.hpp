#pragma once
// A plain recursive reading of a method/path rule's glob (request_rule.hpp), obviously right
// for short globs: the unit tests and fuzz_rules hold RequestRule::matches_path to it.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::policy::reference {

// The segments of a path that starts with '/' ("/" is one empty segment); views into it.
inline std::vector<std::string_view> path_segments(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t at = 1;
  for (;;) {
    const auto slash = path.find('/', at);
    out.push_back(path.substr(at, slash == std::string_view::npos ? slash : slash - at));
    if (slash == std::string_view::npos) return out;
    at = slash + 1;
  }
}

// `glob` from its segment `gi` against `path` from its segment `pi`: "**" takes any number
// of segments, "*" one that is not empty, anything else itself.
inline bool glob_matches(const std::vector<std::string>& glob, std::size_t gi,
                         const std::vector<std::string_view>& path, std::size_t pi) {
  if (gi == glob.size()) return pi == path.size();
  if (glob[gi] == "**") {
    for (std::size_t k = pi; k <= path.size(); ++k) {
      if (glob_matches(glob, gi + 1, path, k)) return true;
    }
    return false;
  }
  if (pi == path.size()) return false;
  if (glob[gi] == "*" ? path[pi].empty() : glob[gi] != path[pi]) return false;
  return glob_matches(glob, gi + 1, path, pi + 1);
}

}  // namespace vibepit::policy::reference
