#include "modes.hpp"

#include <cstdint>
#include <string>

namespace vibepit::bench {

void add_client_flags(CLI::App& cmd, ClientFlags& f) {
  cmd.add_option("--proxy", f.proxy,
                 "Proxy HOST:PORT, or 'none' to connect directly (the no-proxy ceiling)")
      ->required();
  cmd.add_option("--proxy-user", f.proxy_user,
                 "NAME:TOKEN: each CONNECT and proxied request carries them in "
                 "Proxy-Authorization: Basic, as a shared gateway's tenant does");
  cmd.add_option("--threads", f.threads,
                 "Client I/O threads, one io_context each. Default 1 so that the load "
                 "generator leaves the other cores to the proxy under test")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd.add_option("--timeout", f.timeout_s,
                 "Seconds any single connect, handshake, read or write may take before it "
                 "counts as a timeout error")
      ->check(CLI::Range(0.001, 600.0))
      ->capture_default_str();
}

std::string proxy_auth_field(const ClientFlags& f) {
  if (f.proxy_user.empty()) return {};
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const std::string& in = f.proxy_user;
  std::string b64;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    std::uint32_t v = static_cast<std::uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<std::uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<std::uint8_t>(in[i + 2]);
    b64 += kAlphabet[v >> 18 & 63];
    b64 += kAlphabet[v >> 12 & 63];
    b64 += i + 1 < in.size() ? kAlphabet[v >> 6 & 63] : '=';
    b64 += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return "Proxy-Authorization: Basic " + b64 + "\r\n";
}

}  // namespace vibepit::bench
