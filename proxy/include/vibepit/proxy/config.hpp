#pragma once
// vibepit-proxy configuration: a JSON file, validated completely before anything starts.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::proxy {

struct Endpoint {
  policy::IpAddr addr;
  std::uint16_t port = 0;
  std::string to_string() const;  // "1.2.3.4:53" or "[::1]:53"
};

// "ADDR:PORT" with ADDR an IP literal (IPv6 in brackets). When default_port is non-zero the
// port may be left out. Throws std::invalid_argument with a short reason.
Endpoint parse_endpoint(std::string_view text, std::uint16_t default_port = 0);

enum class SpliceMode { off, automatic };

struct Config {
  std::vector<Endpoint> proxy_listen;
  std::vector<Endpoint> upstream_dns;
  policy::RuleSet rules;
  std::string decision_log = "-";  // path, or "-" for stdout
  unsigned threads = 0;            // 0 = one per core
  SpliceMode splice = SpliceMode::automatic;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds idle_timeout{300'000};
  std::chrono::milliseconds resolve_timeout{3'000};
  std::chrono::milliseconds drain_timeout{10'000};
  std::size_t max_request_head = 16 * 1024;
  std::size_t max_response_head = 64 * 1024;
  std::size_t max_connections = 10'000;
  std::size_t decision_ring = 10'000;
};

// A configuration error names the key and the bad value.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string key, const std::string& message)
      : std::runtime_error(key.empty() ? message : "config key \"" + key + "\": " + message),
        key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// Parse and validate a whole configuration. Unknown keys are errors, so typos are caught.
Config parse_config(std::string_view json_text);
Config load_config(const std::string& path);

}  // namespace vibepit::proxy
