// Methods and path globs on allow-http entries, and request paths as they match them.
#include "vibepit/policy/request_rule.hpp"

#include <algorithm>

namespace vibepit::policy {
namespace {

bool is_unreserved(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// The characters a rule's path may hold besides '/', '*' and escapes: RFC 3986's pchar.
bool is_glob_char(char c) {
  return is_unreserved(c) || c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' ||
         c == ')' || c == '+' || c == ',' || c == ';' || c == '=' || c == ':' || c == '@';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One path segment with its escapes normalised into `out`: unreserved characters decoded,
// other escapes kept with upper-case hex. An error for what a server could read as another
// path: an encoded '/' or '\', an encoded NUL, a '\', a malformed escape. `encoded_dot`:
// a '.' came from an escape.
std::string normalize_segment(std::string_view raw, std::string& out, bool& encoded_dot) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  out.clear();
  encoded_dot = false;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == '\\') return "a '\\' in the path, which some servers read as '/'";
    if (c != '%') {
      out += c;
      continue;
    }
    const int hi = i + 2 < raw.size() ? hex_value(raw[i + 1]) : -1;
    const int lo = i + 2 < raw.size() ? hex_value(raw[i + 2]) : -1;
    if (hi < 0 || lo < 0) return "a '%' that is not followed by two hex digits";
    const auto byte = static_cast<char>(hi * 16 + lo);
    if (byte == '/' || byte == '\\') {
      return "an encoded '/' or '\\' (%2F, %5C), which servers read differently";
    }
    if (byte == '\0') return "an encoded NUL (%00)";
    if (is_unreserved(byte)) {
      out += byte;
      encoded_dot = encoded_dot || byte == '.';
    } else {
      out += '%';
      out += kHex[hi];
      out += kHex[lo];
    }
    i += 2;
  }
  return {};
}

// The segments of a path that starts with '/': "/" is one empty segment.
template <class F>
void for_each_segment(std::string_view path, F&& f) {
  std::size_t at = 1;
  for (;;) {
    const auto slash = path.find('/', at);
    f(path.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
}

}  // namespace

bool RequestRule::allows_method(std::string_view method) const {
  if (methods.empty()) return true;
  return std::binary_search(methods.begin(), methods.end(), method);
}

// The glob's segments against the path's, "**" matching any number of them and "*" one
// that is not empty: the wildcard match with one point to back up to (the last "**"),
// which is exact for these two wildcards, over byte offsets, so it allocates nothing.
bool RequestRule::matches_path(std::string_view path) const {
  if (path.empty() || path.front() != '/') return false;
  const std::size_t end = path.size() + 1;  // the offset past the last segment
  auto next = [&](std::size_t at) {
    const auto slash = path.find('/', at);
    return slash == std::string_view::npos ? end : slash + 1;
  };
  auto segment = [&](std::size_t at) { return path.substr(at, next(at) - 1 - at); };
  const std::size_t none = static_cast<std::size_t>(-1);
  std::size_t g = 0, p = 1, star_g = none, star_p = 0;
  while (p != end) {
    if (g < segments.size() && segments[g] == "**") {
      star_g = g++;
      star_p = p;
      continue;
    }
    if (g < segments.size() &&
        (segments[g] == "*" ? !segment(p).empty() : segments[g] == segment(p))) {
      ++g;
      p = next(p);
      continue;
    }
    if (star_g == none) return false;
    g = star_g + 1;  // let the last "**" take one more segment, and try again after it
    star_p = next(star_p);
    p = star_p;
  }
  while (g < segments.size() && segments[g] == "**") ++g;
  return g == segments.size();
}

std::variant<RequestRule, std::string> parse_request_rule(std::string_view methods,
                                                          std::string_view path) {
  RequestRule r;
  if (methods.empty()) return std::string("missing methods (GET,HEAD or *)");
  if (methods != "*") {
    std::size_t at = 0;
    for (;;) {
      const auto comma = methods.find(',', at);
      const auto m = methods.substr(at, comma == std::string_view::npos ? comma : comma - at);
      if (m.empty()) return std::string("an empty method in the list");
      if (m == "*") return std::string("'*' stands for every method: give it alone");
      if (m.size() > 20) return std::string("a method longer than 20 characters");
      for (char c : m) {
        if (c >= 'a' && c <= 'z') return std::string("methods are upper case (GET, not get)");
        if (!(c >= 'A' && c <= 'Z') && c != '-') {
          return std::string("a method is letters and '-' only");
        }
      }
      r.methods.emplace_back(m);
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    std::sort(r.methods.begin(), r.methods.end());
    r.methods.erase(std::unique(r.methods.begin(), r.methods.end()), r.methods.end());
    if (r.methods.size() > kMaxMethods) return std::string("more than 16 methods");
  }

  if (path.empty() || path.front() != '/') return std::string("the path must start with '/'");
  if (path.size() > kMaxPathGlob) return std::string("a path longer than 1024 bytes");
  for (char c : path) {
    if (c == '?') return std::string("a path rule has no query ('?'): the query is not matched");
    if (c == '#') return std::string("a path rule has no fragment ('#')");
    if (c != '/' && c != '*' && c != '%' && c != '\\' && !is_glob_char(c)) {
      return std::string("a character that must be percent-encoded in a path");
    }
  }
  std::string error, seg;
  for_each_segment(path, [&](std::string_view raw) {
    if (!error.empty()) return;
    if (raw == "*" || raw == "**") {
      r.segments.emplace_back(raw);
      return;
    }
    if (raw.find('*') != std::string_view::npos) {
      error = "'*' must be a whole segment (/*/ for one, /**/ for any number)";
      return;
    }
    bool encoded_dot = false;
    error = normalize_segment(raw, seg, encoded_dot);
    if (error.empty() && (seg == "." || seg == "..")) error = "a '.' or '..' segment";
    r.segments.push_back(seg);
  });
  if (!error.empty()) return error;
  if (r.segments.size() > kMaxGlobSegments) return std::string("more than 64 path segments");

  if (r.methods.empty()) r.text = "*";
  for (const auto& m : r.methods) r.text += (r.text.empty() ? "" : ",") + m;
  r.text += ' ';
  for (const auto& s : r.segments) r.text += "/" + s;
  return r;
}

NormalPath normalize_path(std::string_view target) {
  NormalPath out;
  const auto q = target.find('?');
  std::string_view raw = target.substr(0, q);
  if (q != std::string_view::npos) out.query.assign(target.substr(q));
  if (raw.empty() || raw.front() != '/') {
    out.error = "the path does not start with '/'";
    return out;
  }
  if (raw.size() > kMaxRequestPath) {
    out.error = "a path longer than " + std::to_string(kMaxRequestPath) + " bytes";
    return out;
  }
  for (char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    if (b <= 0x20 || b >= 0x7f) {
      out.error = "a byte in the path that is not printable ASCII";
      return out;
    }
    if (c == '#') {
      out.error = "a fragment ('#') in the request target";
      return out;
    }
  }
  // Segments decoded, then "." and ".." resolved against those before them; a "." or ".."
  // last leaves the path ending in '/'.
  std::vector<std::string> kept;
  std::string seg;
  bool trailing_dot = false;
  for_each_segment(raw, [&](std::string_view piece) {
    if (!out.error.empty()) return;
    bool encoded_dot = false;
    out.error = normalize_segment(piece, seg, encoded_dot);
    if (!out.error.empty()) return;
    trailing_dot = seg == "." || seg == "..";
    if (trailing_dot && encoded_dot) {
      out.error = "an encoded '.' or '..' segment (%2E), which servers read differently";
    } else if (seg == "..") {
      if (kept.empty()) {
        out.error = "a '..' segment above the root";
      } else {
        kept.pop_back();
      }
    } else if (seg != ".") {
      kept.push_back(seg);
    }
  });
  if (!out.error.empty()) return out;
  if (trailing_dot || kept.empty()) kept.emplace_back();
  for (const auto& s : kept) out.path += "/" + s;
  return out;
}

}  // namespace vibepit::policy
