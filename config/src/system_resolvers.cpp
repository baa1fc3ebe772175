#include "vibepit/config/system_resolvers.hpp"

#include <fstream>

namespace vibepit::config {
namespace {

constexpr std::size_t kMaxFileBytes = 64 * 1024;  // resolv.conf is a few lines

std::string_view next_token(std::string_view& line) {
  auto start = line.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  auto end = line.find_first_of(" \t\r");
  auto token = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return token;
}

// Empty when the file is missing or unreadable: both mean "names no server".
std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text(kMaxFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

}  // namespace

std::vector<Endpoint> parse_resolv_conf(std::string_view text) {
  std::vector<Endpoint> out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto hash = line.find_first_of("#;"); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    if (next_token(line) != "nameserver") continue;
    auto addr = next_token(line);
    if (auto ip = policy::IpAddr::parse(addr)) out.push_back(Endpoint{*ip, 53});
  }
  return out;
}

bool is_resolved_stub(const Endpoint& ep) {
  const auto& b = ep.addr.bytes;
  return !ep.addr.v6 && b[0] == 127 && b[1] == 0 && b[2] == 0 && (b[3] == 53 || b[3] == 54);
}

SystemResolvers system_resolvers(const ResolverFiles& files) {
  auto named = parse_resolv_conf(read_small_file(files.resolv_conf));
  if (named.empty()) {
    throw ConfigError("upstream-dns",
                      "is not set, and " + files.resolv_conf +
                          " names no usable nameserver: set upstream-dns to the DNS servers the "
                          "proxy should ask (docs/config.md)");
  }
  bool only_stub = true;
  for (const auto& ep : named) only_stub = only_stub && is_resolved_stub(ep);
  if (only_stub) {
    // The stub answers only while systemd-resolved runs; its own upstream list is what the
    // stub forwards to, so asking those servers directly works either way.
    auto upstreams = parse_resolv_conf(read_small_file(files.resolved_upstreams));
    std::erase_if(upstreams, is_resolved_stub);
    if (!upstreams.empty()) {
      auto source = files.resolved_upstreams + " (systemd-resolved's upstream servers; " +
                    files.resolv_conf + " names only its stub " + to_string(named) + ")";
      return {std::move(upstreams), std::move(source)};
    }
    return {std::move(named), files.resolv_conf + " (systemd-resolved's stub; " +
                                  files.resolved_upstreams + " names no upstream server)"};
  }
  return {std::move(named), files.resolv_conf};
}

}  // namespace vibepit::config
