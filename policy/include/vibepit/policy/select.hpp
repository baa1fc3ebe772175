#pragma once
// Which of the addresses a name resolved to may be dialled (invariant 2: a blocked range is
// refused for every resolved address, whatever rule allowed the name). Pure.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vibepit/policy/classify.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::policy {

// The addresses a name resolved to, judged one by one. Only `dialable` may be dialled: in
// the resolver's order, at most `limit` of them. `first_blocked` and `range` name the first
// refused address, for the record and the message when none is dialable.
struct Selection {
  std::vector<IpAddr> dialable;
  std::optional<IpAddr> first_blocked;
  std::string range;
};
Selection select_dialable(std::span<const IpAddr> addresses, const Classifier& classifier,
                          std::size_t limit);

}  // namespace vibepit::policy
