#pragma once
// Host name checks shared by rule parsing and decisions; not part of the public interface.
#include <string_view>

namespace vibepit::policy::detail {

inline constexpr std::size_t kMaxNameLength = 253;  // octets, without the trailing dot
inline constexpr std::size_t kMaxLabelLength = 63;

enum class NameProblem {
  ok,
  empty_label,
  star,            // '*' anywhere (the caller strips a leading "*." first)
  label_too_long,  // over 63 octets
  bad_char,        // not a letter, digit, '-' or '_'
  hyphen,          // a label starts or ends with '-'
  numeric,         // the last label is numeric but the whole is no dotted quad ("127.1")
  dotted_quad,     // a strict dotted-quad IPv4 address, not a name
};

// Checks the labels of a name given without a trailing dot. Letters of either case pass.
// Does not check the total length. On bad_char, `*bad` is set to the offending byte.
NameProblem check_name(std::string_view name, char* bad);

inline bool is_ascii_upper(char c) {
  return c >= 'A' && c <= 'Z';
}

}  // namespace vibepit::policy::detail
