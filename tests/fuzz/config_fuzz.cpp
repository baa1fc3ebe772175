// Fuzz the configuration parser: any bytes give a Config or a ConfigError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vibepit/proxy/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto cfg = vibepit::proxy::parse_config(text);
    // A config that parsed is complete: listeners and upstreams are present and valid.
    if (cfg.proxy_listen.empty() || cfg.upstream_dns.empty()) __builtin_trap();
    for (const auto& ep : cfg.proxy_listen) {
      auto again = vibepit::proxy::parse_endpoint(ep.to_string());
      if (again.to_string() != ep.to_string()) __builtin_trap();
    }
  } catch (const vibepit::proxy::ConfigError&) {
  }
  return 0;
}
