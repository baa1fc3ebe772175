#include "vibepit/policy/select.hpp"

#include <utility>

namespace vibepit::policy {

Selection select_dialable(std::span<const IpAddr> addresses, const Classifier& classifier,
                          std::size_t limit) {
  Selection s;
  for (const IpAddr& ip : addresses) {
    Classification c = classifier.classify(ip);
    if (!c.blocked) {
      if (s.dialable.size() < limit) s.dialable.push_back(ip);
    } else if (!s.first_blocked) {
      s.first_blocked = ip;
      s.range = std::move(c.range);
    }
  }
  return s;
}

}  // namespace vibepit::policy
