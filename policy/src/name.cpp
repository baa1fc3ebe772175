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

}  // namespace

NameProblem check_name(std::string_view name, char* bad) {
  if (name.find('*') != std::string_view::npos) return NameProblem::star;
  std::size_t start = 0;
  std::string_view last;
  while (true) {
    std::size_t dot = name.find('.', start);
    std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty()) return NameProblem::empty_label;
    if (label.size() > kMaxLabelLength) return NameProblem::label_too_long;
    for (char c : label) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '_';
      if (!ok) {
        if (bad != nullptr) *bad = c;
        return NameProblem::bad_char;
      }
    }
    if (label.front() == '-' || label.back() == '-') return NameProblem::hyphen;
    last = label;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  // A resolver would read "127.1" or "0x7f.0.0.1" as an address: such names are refused.
  if (is_numeric_label(last)) {
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

std::string normalize_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::string out(name);
  for (char& c : out) {
    if (is_ascii_upper(c)) c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace vibepit::policy
