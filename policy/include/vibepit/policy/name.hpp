#pragma once
// Host names. One validator for every place a name arrives: the HTTP authority a client
// sends, the rule grammar, and the decisions. What one accepts, the others accept, so a
// name that passes parsing but can never match a rule does not exist.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace vibepit::policy {

inline constexpr std::size_t kMaxNameLength = 253;  // octets, without the trailing dot
inline constexpr std::size_t kMaxLabelLength = 63;

enum class NameProblem {
  ok,
  empty_label,
  star,            // '*' anywhere (the rule grammar strips a leading "*." first)
  label_too_long,  // over 63 octets
  bad_char,        // not a letter, digit, '-' or '_'
  hyphen,          // a label starts or ends with '-'
  numeric,         // the last label is numeric but the whole is no dotted quad ("127.1")
  dotted_quad,     // a strict dotted-quad IPv4 address, not a name
};

// Checks the labels of a name given without a trailing dot. Letters of either case pass.
// Does not check the total length. On bad_char, `*bad` (when given) is the offending byte;
// on ok, `*has_upper` (when given) says whether any letter is upper case.
NameProblem check_name(std::string_view name, char* bad = nullptr, bool* has_upper = nullptr);

// What is wrong, for a message: "a label may not start or end with '-'". (dotted_quad reads
// as "not a valid IP address or host name": it is the fault of a wildcard or a DNS name.)
std::string describe(NameProblem problem);

// True when `name` (no trailing dot) is a host name a rule could match.
bool valid_name(std::string_view name);

// ASCII lower case, one trailing dot removed.
std::string normalize_name(std::string_view name);
// The same into `out`, replacing what it held and keeping its capacity: a caller that
// normalises name after name into one string allocates only when a name outgrows it.
void normalize_name(std::string_view name, std::string& out);

// The form a decision matches: `host` with one trailing dot removed and in lower case
// (copied into `storage` only when it has upper case), or nullopt when it is no valid host
// name. One pass over the name in the common case.
std::optional<std::string_view> matchable_name(std::string_view host, std::string& storage);

inline bool is_ascii_upper(char c) {
  return c >= 'A' && c <= 'Z';
}

// Equal but for the case of ASCII letters (field names, DNS names).
inline bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const char x = is_ascii_upper(a[i]) ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    const char y = is_ascii_upper(b[i]) ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) return false;
  }
  return true;
}

}  // namespace vibepit::policy
