#pragma once
// Methods and a path glob on an allow-http entry (docs/rules.md):
//
//   api.github.com:443 GET,HEAD /repos/acme/**
//
// A rule of this form allows only the requests whose method is one of its methods ("*":
// any) and whose path, normalised (normalize_path), matches its glob, where "*" is one
// path segment and "**" any number of them. Such a rule makes its host:port inspected:
// each request is decided on its own. Pure: no I/O.
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace vibepit::policy {

inline constexpr std::size_t kMaxPathGlob = 1024;     // bytes of a rule's path glob
inline constexpr std::size_t kMaxGlobSegments = 64;   // segments of a rule's path glob
inline constexpr std::size_t kMaxMethods = 16;        // methods of one rule
inline constexpr std::size_t kMaxRequestPath = 8192;  // bytes of a request's path, to match

struct RequestRule {
  std::vector<std::string> methods;   // upper case, sorted, unique; empty: any method ("*")
  std::vector<std::string> segments;  // the glob's segments, normalised: text, "*" or "**"
  std::string text;                   // canonical: "GET,HEAD /repos/acme/**"

  bool allows_method(std::string_view method) const;
  // `path` as normalize_path() gives it (starts with '/', no query).
  bool matches_path(std::string_view path) const;
  bool matches(std::string_view method, std::string_view path) const {
    return allows_method(method) && matches_path(path);
  }
  friend bool operator==(const RequestRule& a, const RequestRule& b) { return a.text == b.text; }
};

// The METHODS and PATH parts of an entry. On error, what is wrong (the caller names the
// entry): "a method must be upper-case letters (GET, not get)".
std::variant<RequestRule, std::string> parse_request_rule(std::string_view methods,
                                                          std::string_view path);

// A request's path as the rules match it, or why it is refused. From the request target's
// path (origin form, "/a/b?q"): the query is dropped; percent-encoded unreserved characters
// (letters, digits, "-._~") are decoded and other escapes' hex put in upper case; "." and
// ".." segments are removed (RFC 3986 5.2.4). Refused, because a server could read them
// otherwise than the rules do: an encoded "/" or "\" (%2F, %5C), a "\", an encoded NUL, an
// encoded "." or ".." segment, a ".." above the root, a malformed escape, a byte that is not
// printable ASCII, a fragment, and a path that does not start with "/" or is longer than
// kMaxRequestPath. The normalised path is what the request goes upstream with.
struct NormalPath {
  std::string path;   // normalised, without the query
  std::string query;  // "?..." as it came, or empty
  std::string error;  // not empty: refused, and why
};
NormalPath normalize_path(std::string_view target);

}  // namespace vibepit::policy
