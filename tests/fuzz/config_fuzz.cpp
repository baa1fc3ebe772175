// Fuzz the configuration parser: any bytes give a Config or a ConfigError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vibepit/config/config.hpp"
#include "vibepit/config/system_resolvers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto cfg = vibepit::config::parse_config(text);
    // A config that parsed is complete: listeners are present and valid. An absent
    // upstream-dns stays empty (the machine's resolvers are asked later).
    if (cfg.proxy.listen.empty()) __builtin_trap();
    for (const auto& ep : cfg.proxy.listen) {
      auto again = vibepit::config::parse_endpoint(ep.to_string());
      if (again.to_string() != ep.to_string()) __builtin_trap();
    }
  } catch (const vibepit::config::ConfigError&) {
  }
  // The same bytes read as a resolv.conf: any input gives a list, each entry on port 53.
  for (const auto& ep : vibepit::config::parse_resolv_conf(text)) {
    if (ep.port != 53) __builtin_trap();
  }
  return 0;
}
