#pragma once
// The machine's DNS servers, for a config that leaves out upstream-dns: what
// /etc/resolv.conf names, or systemd-resolved's upstream list when it names only the stub.
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/config/config.hpp"

namespace vibepit::config {

// The usable `nameserver` lines of a resolv.conf text, in order, on port 53. Lines that do
// not parse, and scoped IPv6 addresses (fe80::1%eth0), are skipped. Never throws.
std::vector<Endpoint> parse_resolv_conf(std::string_view text);

// systemd-resolved's local stub listeners (127.0.0.53 and 127.0.0.54).
bool is_resolved_stub(const Endpoint& ep);

struct ResolverFiles {
  std::string resolv_conf = "/etc/resolv.conf";
  std::string resolved_upstreams = "/run/systemd/resolve/resolv.conf";
};

struct SystemResolvers {
  std::vector<Endpoint> servers;
  std::string source;  // where they came from, in words, for the start-up log
};

// Reads the files. Throws ConfigError("upstream-dns", ...) when no server is named.
SystemResolvers system_resolvers(const ResolverFiles& files = {});

}  // namespace vibepit::config
