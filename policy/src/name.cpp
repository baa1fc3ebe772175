// Host-name checks shared by the HTTP authority parser, the rule grammar and the decisions.
#include "vibepit/policy/name.hpp"

#include <array>

#include "ip_detail.hpp"

namespace vibepit::policy {
namespace {

bool is_numeric_label(std::string_view label) {
  bool hex = label.size() >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X');
  for (std::size_t i = hex ? 2 : 0; i < label.size(); ++i) {
    char c = label[i];
    bool digit = c >= '0' && c <= '9';
    bool hex_digit = (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!digit && !(hex && hex_digit)) return false;
  }
  return true;
}

// What each byte is in a name: one table lookup per byte on the decision path.
constexpr std::uint8_t kOther = 0, kLower = 1, kUpper = 2, kDot = 3;
constexpr std::array<std::uint8_t, 256> kByteClass = [] {
  std::array<std::uint8_t, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<std::size_t>(c)] = kLower;
  for (int c = '0'; c <= '9'; ++c) t[static_cast<std::size_t>(c)] = kLower;
  t['-'] = kLower;
  t['_'] = kLower;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<std::size_t>(c)] = kUpper;
  t['.'] = kDot;
  return t;
}();

// '*' anywhere outranks every other problem, so that a misplaced wildcard is named as such.
NameProblem fail(std::string_view name, NameProblem p) {
  return name.find('*') != std::string_view::npos ? NameProblem::star : p;
}

}  // namespace

NameProblem check_name(std::string_view name, char* bad, bool* has_upper) {
  // One pass. Per label, in this order: empty, longer than 63, a byte outside
  // [A-Za-z0-9_-], a leading or trailing '-'.
  bool upper = false;
  std::size_t start = 0;
  std::size_t bad_at = std::string_view::npos;  // first bad byte of the current label
  for (std::size_t i = 0;; ++i) {
    const std::uint8_t cls =
        i < name.size() ? kByteClass[static_cast<unsigned char>(name[i])] : kDot;
    if (cls == kLower) continue;
    if (cls == kUpper) {
      upper = true;
      continue;
    }
    if (cls == kOther) {
      if (bad_at == std::string_view::npos) bad_at = i;
      continue;
    }
    // The end of a label.
    const std::size_t len = i - start;
    if (len == 0) return fail(name, NameProblem::empty_label);
    if (len > kMaxLabelLength) return fail(name, NameProblem::label_too_long);
    if (bad_at != std::string_view::npos) {
      if (bad != nullptr) *bad = name[bad_at];
      return fail(name, NameProblem::bad_char);
    }
    if (name[start] == '-' || name[i - 1] == '-') return fail(name, NameProblem::hyphen);
    if (i >= name.size()) break;
    start = i + 1;
  }
  if (has_upper != nullptr) *has_upper = upper;
  // A resolver would read "127.1" or "0x7f.0.0.1" as an address: such names are refused.
  if (is_numeric_label(name.substr(start))) {
    std::array<std::uint8_t, 4> quad{};
    return detail::parse_dotted_quad(name, quad) ? NameProblem::dotted_quad : NameProblem::numeric;
  }
  return NameProblem::ok;
}

std::string describe(NameProblem problem) {
  switch (problem) {
    case NameProblem::empty_label:
      return "empty label in domain";
    case NameProblem::star:
      return "'*' must be a whole label at the start (\"*.example.com\")";
    case NameProblem::label_too_long:
      return "label longer than 63 octets";
    case NameProblem::bad_char:
      return "invalid character in domain (letters, digits, '-' and '_' only)";
    case NameProblem::hyphen:
      return "a label may not start or end with '-'";
    case NameProblem::numeric:
    case NameProblem::dotted_quad:
      return "not a valid IP address or host name";
    case NameProblem::ok:
      break;
  }
  return "valid";
}

bool valid_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxNameLength && check_name(name) == NameProblem::ok;
}

std::optional<std::string_view> matchable_name(std::string_view host, std::string& storage) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > kMaxNameLength) return std::nullopt;
  bool upper = false;
  if (check_name(host, nullptr, &upper) != NameProblem::ok) return std::nullopt;
  if (!upper) return host;
  storage = normalize_name(host);
  return std::string_view(storage);
}

std::string normalize_name(std::string_view name) {
  std::string out;
  normalize_name(name, out);
  return out;
}

void normalize_name(std::string_view name, std::string& out) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  out.assign(name);
  for (char& c : out) {
    if (is_ascii_upper(c)) c = static_cast<char>(c - 'A' + 'a');
  }
}

}  // namespace vibepit::policy
