#include "vibepit/config/config.hpp"

#include "json_values.hpp"
#include "vibepit/policy/dns_types.hpp"
#include "vibepit/policy/ip.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace vibepit::config {
namespace {

using json = nlohmann::json;

std::uint16_t parse_port(std::string_view digits) {
  unsigned value = 0;
  if (digits.empty() || digits.size() > 5) throw std::invalid_argument("bad port");
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || value > 65535) {
    throw std::invalid_argument("bad port \"" + std::string(digits) + "\"");
  }
  return static_cast<std::uint16_t>(value);
}

using detail::string_list;
using detail::type_name;

// A list of ADDR:PORT strings, or one such string.
std::vector<Endpoint> endpoint_list(const json& v, const std::string& key,
                                    std::uint16_t default_port) {
  std::vector<Endpoint> out;
  const auto texts =
      v.is_string() ? std::vector<std::string>{v.get<std::string>()} : string_list(v, key);
  for (const auto& text : texts) {
    try {
      out.push_back(parse_endpoint(text, default_port));
    } catch (const std::invalid_argument& e) {
      throw ConfigError(key, "\"" + text + "\": " + e.what());
    }
  }
  if (out.empty()) throw ConfigError(key, "must name at least one address");
  return out;
}

bool is_unspecified(const policy::IpAddr& a) {
  return a == policy::IpAddr{a.v6, {}};
}

struct Listener {
  const char* key;  // proxy-listen or dns-listen
  Endpoint at;
};

// The proxy or DNS listener through which the proxy's clients reach `a`, if any: one that
// listens on `a`, or on every address of its family.
std::optional<Listener> served_by_listeners(const Config& cfg, const policy::IpAddr& a) {
  for (const auto& [key, list] :
       {std::pair{"proxy-listen", &cfg.proxy.listen}, std::pair{"dns-listen", &cfg.dns.listen}}) {
    for (const auto& e : *list) {
      if (e.addr == a || (is_unspecified(e.addr) && e.addr.v6 == a.v6)) return Listener{key, e};
    }
  }
  return std::nullopt;
}

// The control API must be out of reach of the proxy's clients (in a session: the sandbox),
// so it may share no address with the proxy and DNS listeners, and may not listen on all.
void check_control_listen(const Config& cfg) {
  for (const auto& e : cfg.control.listen) {
    if (is_unspecified(e.addr)) {
      throw ConfigError("control-listen",
                        "\"" + e.to_string() +
                            "\": an unspecified address would serve the control API on every "
                            "interface, the proxy clients' included; name one host-side address");
    }
    if (auto other = served_by_listeners(cfg, e.addr)) {
      throw ConfigError("control-listen",
                        "\"" + e.to_string() + "\": " + e.addr.to_string() + " is also served by " +
                            other->key + " \"" + other->at.to_string() +
                            "\"; the control API must not share an address with the listeners "
                            "the proxy's clients reach");
    }
  }
}

std::uint64_t bounded_number(const json& v, const std::string& key, std::uint64_t lo,
                             std::uint64_t hi) {
  if (!v.is_number_unsigned()) {
    throw ConfigError(key, "must be a whole number from " + std::to_string(lo) + " to " +
                               std::to_string(hi) + ", got " + v.dump());
  }
  auto n = v.get<std::uint64_t>();
  if (n < lo || n > hi) {
    throw ConfigError(key, std::to_string(n) + " is out of range " + std::to_string(lo) + ".." +
                               std::to_string(hi));
  }
  return n;
}

std::chrono::milliseconds duration_ms(const json& v, const std::string& key) {
  // From 1 ms to one day: zero would mean "no deadline", which we never allow.
  return std::chrono::milliseconds(bounded_number(v, key, 1, 86'400'000));
}

std::uint32_t seconds(const json& v, const std::string& key, std::uint64_t hi) {
  return static_cast<std::uint32_t>(bounded_number(v, key, 0, hi));
}

// The dns-* keys. Returns false when `key` is not one of them.
bool parse_dns_key(const std::string& key, const json& v, DnsConfig& dns) {
  if (key == "dns-listen") {
    dns.listen = endpoint_list(v, key, 0);
  } else if (key == "dns-deny-rcode") {
    if (v == "REFUSED") {
      dns.deny_nxdomain = false;
    } else if (v == "NXDOMAIN") {
      dns.deny_nxdomain = true;
    } else {
      throw ConfigError(key, "must be \"REFUSED\" or \"NXDOMAIN\", got " + v.dump());
    }
  } else if (key == "dns-qtypes") {
    dns.qtypes.clear();
    for (const auto& name : string_list(v, key)) {
      auto t = policy::dns_type_from_name(name);
      if (!t) {
        throw ConfigError(key,
                          "\"" + name + "\" is not a DNS type name (A, AAAA, TXT, ... or TYPEn)");
      }
      if (*t == 255 || *t == 252 || *t == 251) {
        throw ConfigError(
            key,
            "\"" + name +
                "\" cannot be allowed: ANY gets the RFC 8482 answer, zone transfers are refused");
      }
      dns.qtypes.push_back(*t);
    }
  } else if (key == "dns-cache-entries") {
    dns.cache_entries = bounded_number(v, key, 0, 10'000'000);
  } else if (key == "dns-cache-min-ttl") {
    dns.cache_min_ttl = seconds(v, key, 86'400);
  } else if (key == "dns-cache-max-ttl") {
    dns.cache_max_ttl = seconds(v, key, 7 * 86'400);
  } else if (key == "dns-cache-max-negative-ttl") {
    dns.cache_max_negative_ttl = seconds(v, key, 86'400);
  } else if (key == "dns-client-qps") {
    dns.client_qps = static_cast<std::uint32_t>(bounded_number(v, key, 0, 10'000'000));
  } else if (key == "dns-client-burst") {
    dns.client_burst = static_cast<std::uint32_t>(bounded_number(v, key, 1, 10'000'000));
  } else if (key == "dns-max-pending") {
    dns.max_pending = bounded_number(v, key, 1, 1'000'000);
  } else if (key == "dns-timeout-ms") {
    dns.timeout = duration_ms(v, key);
  } else if (key == "dns-udp-payload") {
    dns.udp_payload = static_cast<std::uint16_t>(bounded_number(v, key, 512, 4096));
  } else if (key == "dns-tcp-idle-ms") {
    dns.tcp_idle = duration_ms(v, key);
  } else if (key == "dns-max-tcp") {
    dns.max_tcp = bounded_number(v, key, 1, 1'000'000);
  } else if (key == "dns-max-qname") {
    dns.max_qname = bounded_number(v, key, 1, 253);
  } else if (key == "dns-max-label") {
    dns.max_label = bounded_number(v, key, 1, 63);
  } else {
    return false;
  }
  return true;
}

// A unix socket's path: absolute, and short enough for sun_path (107 bytes and a NUL).
std::string socket_path(const json& v, const std::string& key) {
  if (!v.is_string()) throw ConfigError(key, "expected a string (an absolute path)");
  const auto& p = v.get_ref<const std::string&>();
  if (p.empty() || p[0] != '/' || p.find('\0') != std::string::npos)
    throw ConfigError(key, "expected an absolute path");
  if (p.size() > 107)
    throw ConfigError(key, "longer than the 107 bytes a unix socket's path may have (" +
                               std::to_string(p.size()) + ")");
  return p;
}

// The control-* keys. Returns false when `key` is not one of them.
bool parse_control_key(const std::string& key, const json& v, ControlConfig& c) {
  if (key == "control-listen") {
    c.listen = endpoint_list(v, key, 0);
  } else if (key == "control-socket") {
    c.socket = socket_path(v, key);
  } else if (key == "control-max-clients") {
    c.max_clients = bounded_number(v, key, 1, 1'000);
  } else if (key == "control-rate") {
    c.rate = static_cast<std::uint32_t>(bounded_number(v, key, 0, 1'000'000));
  } else if (key == "control-burst") {
    c.burst = static_cast<std::uint32_t>(bounded_number(v, key, 1, 1'000'000));
  } else if (key == "control-max-body") {
    c.max_body = bounded_number(v, key, 1024, 64 << 20);
  } else if (key == "control-max-entries") {
    c.max_entries = bounded_number(v, key, 1, 1'000'000);
  } else if (key == "control-timeout-ms") {
    c.timeout = duration_ms(v, key);
  } else if (key == "control-idle-ms") {
    c.idle = duration_ms(v, key);
  } else if (key == "control-cert-lifetime-hours") {
    c.cert_lifetime_hours = static_cast<std::uint32_t>(bounded_number(v, key, 1, 24 * 366));
  } else if (key == "control-stats-hosts") {
    c.stats_hosts = bounded_number(v, key, 1, 1'000'000);
  } else {
    return false;
  }
  return true;
}

// One entry of key credentials: {name, host, header?, format?, from-file | from-env}.
CredentialConfig parse_credential_entry(const json& v, std::size_t index) {
  const std::string key = "credentials";
  const std::string at = "entry " + std::to_string(index) + ": ";
  if (!v.is_object()) throw ConfigError(key, at + "must be an object, got " + type_name(v));
  std::string fields[6];  // name, host, header, format, from-file, from-env
  static const char* const kFields[6] = {"name",   "host",      "header",
                                         "format", "from-file", "from-env"};
  for (const auto& [k, x] : v.items()) {
    const auto* f = std::find(std::begin(kFields), std::end(kFields), k);
    if (f == std::end(kFields)) {
      throw ConfigError(key, at + "unknown key \"" + k.substr(0, 32) +
                                 "\" (name, host, header, format, from-file, from-env; a value "
                                 "is never written in the config)");
    }
    if (!x.is_string() || x.get<std::string>().empty())
      throw ConfigError(key, at + k + " must be a non-empty string");
    fields[f - std::begin(kFields)] = x.get<std::string>();
  }
  if (fields[0].empty() || fields[1].empty()) throw ConfigError(key, at + "needs name and host");
  auto made = policy::make_credential(fields[0], fields[1], fields[2], fields[3]);
  if (auto* e = std::get_if<policy::RuleError>(&made)) throw ConfigError(key, e->message());
  CredentialConfig c{std::move(std::get<policy::CredentialSpec>(made)), fields[4], fields[5]};
  if (c.from_file.empty() == c.from_env.empty())
    throw ConfigError(key, at + "needs exactly one of from-file and from-env");
  if (!c.from_file.empty() && c.from_file.front() != '/')
    throw ConfigError(key, at + "from-file must be an absolute path");
  return c;
}

std::vector<CredentialConfig> parse_credentials(const json& v) {
  if (!v.is_array()) throw ConfigError("credentials", "must be a list of objects");
  std::vector<CredentialConfig> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto c = parse_credential_entry(v[i], i);
    for (const auto& o : out) {
      if (o.spec.name == c.spec.name)
        throw ConfigError("credentials", "two credentials are named " + c.spec.name);
      if (policy::same_header_same_host(o.spec, c.spec))
        throw ConfigError("credentials", o.spec.name + " and " + c.spec.name + " both set " +
                                             c.spec.header + " on " + c.spec.host.text);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

namespace detail {

std::string type_name(const json& v) {
  return v.type_name();
}

std::vector<std::string> string_list(const json& v, const std::string& key) {
  if (!v.is_array()) throw ConfigError(key, "must be a list of strings, got " + type_name(v));
  std::vector<std::string> out;
  for (const auto& item : v) {
    if (!item.is_string()) {
      throw ConfigError(key,
                        "must be a list of strings, got an element of type " + type_name(item));
    }
    out.push_back(item.get<std::string>());
  }
  return out;
}

}  // namespace detail

std::string Endpoint::to_string() const {
  return policy::join_host_port(addr.to_string(), port);
}

std::string to_string(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const auto& ep : endpoints) {
    if (!out.empty()) out += ' ';
    out += ep.to_string();
  }
  return out;
}

Endpoint parse_endpoint(std::string_view text, std::uint16_t default_port) {
  std::string_view host = text;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("missing ']'");
    host = text.substr(1, close - 1);
    auto rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') throw std::invalid_argument("expected ':' after ']'");
      port = rest.substr(1);
    }
  } else if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    if (text.find(':') != colon) {
      throw std::invalid_argument("IPv6 addresses need brackets, as in [::1]:53");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto ip = policy::IpAddr::parse(host);
  if (!ip) throw std::invalid_argument("not an IP address (names are not accepted here)");
  Endpoint ep{*ip, default_port};
  if (!port.empty() || text.ends_with(":")) {
    ep.port = parse_port(port);
  } else if (default_port == 0) {
    throw std::invalid_argument("missing port");
  }
  return ep;
}

Config parse_config(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
    throw ConfigError("", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw ConfigError("", "the configuration must be a JSON object");

  Config cfg;
  bool have_listen = false;
  const json* dns_tenants = nullptr;
  for (const auto& [key, v] : root.items()) {
    if (key == "proxy-listen") {
      cfg.proxy.listen = endpoint_list(v, key, 0);
      have_listen = true;
    } else if (key == "upstream-dns") {
      cfg.set_upstream_dns(endpoint_list(v, key, 53));
    } else if (key == "allow-http") {
      cfg.rules.allow_http = string_list(v, key);
    } else if (key == "allow-dns") {
      cfg.rules.allow_dns = string_list(v, key);
    } else if (key == "credentials") {
      cfg.credentials = parse_credentials(v);
    } else if (key == "tenants") {
      detail::parse_tenants(v, cfg);
    } else if (key == "dns-tenants") {
      dns_tenants = &v;  // after tenants, whatever the order of the keys
    } else if (key == "block-cidr") {
      cfg.rules.block_cidr = string_list(v, key);
    } else if (key == "mode") {
      const auto mode = v.is_string() ? policy::parse_mode(v.get<std::string>()) : std::nullopt;
      if (!mode) throw ConfigError(key, "must be \"enforce\" or \"audit\"");
      cfg.rules.mode = *mode;
    } else if (key == "decision-log") {
      if (!v.is_string() || v.get<std::string>().empty()) {
        throw ConfigError(key, "must be a file path or \"-\" for standard output");
      }
      cfg.log.path = v.get<std::string>();
    } else if (key == "threads") {
      cfg.proxy.threads = static_cast<unsigned>(bounded_number(v, key, 0, 256));
    } else if (key == "splice") {
      if (v == "auto") {
        cfg.proxy.splice = SpliceMode::automatic;
      } else if (v == "off") {
        cfg.proxy.splice = SpliceMode::off;
      } else {
        throw ConfigError(key, "must be \"auto\" or \"off\", got " + v.dump());
      }
    } else if (key == "tunnel-tls") {
      if (v == "check") {
        cfg.proxy.tunnel_tls = TunnelTls::check;
      } else if (v == "require") {
        cfg.proxy.tunnel_tls = TunnelTls::require;
      } else if (v == "off") {
        cfg.proxy.tunnel_tls = TunnelTls::off;
      } else {
        throw ConfigError(key, "must be \"check\", \"require\" or \"off\", got " + v.dump());
      }
    } else if (key == "log-format") {
      if (v != "text" && v != "json") throw ConfigError(key, "must be \"text\" or \"json\"");
      cfg.log_format = v.get<std::string>();
    } else if (key == "health-listen") {
      cfg.health_listen = endpoint_list(v, key, 0);
    } else if (key == "rules-file") {
      if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().front() != '/') {
        throw ConfigError(key, "must be an absolute file path");
      }
      cfg.rules_file = v.get<std::string>();
    } else if (key == "inspect-ca-cert-out" || key == "upstream-ca-file") {
      if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().front() != '/') {
        throw ConfigError(key, "must be an absolute file path");
      }
      (key == "upstream-ca-file" ? cfg.proxy.upstream_ca_file : cfg.proxy.inspect_ca_cert_out) =
          v.get<std::string>();
    } else if (key == "header-timeout-ms") {
      cfg.proxy.header_timeout = duration_ms(v, key);
    } else if (key == "connect-timeout-ms") {
      cfg.proxy.connect_timeout = duration_ms(v, key);
    } else if (key == "idle-timeout-ms") {
      cfg.proxy.idle_timeout = duration_ms(v, key);
    } else if (key == "resolve-timeout-ms") {
      cfg.proxy.resolve_timeout = duration_ms(v, key);
    } else if (key == "drain-timeout-ms") {
      cfg.proxy.drain_timeout = duration_ms(v, key);
    } else if (key == "max-request-head") {
      cfg.proxy.max_request_head = bounded_number(v, key, 1024, 1 << 20);
    } else if (key == "max-response-head") {
      cfg.proxy.max_response_head = bounded_number(v, key, 1024, 1 << 20);
    } else if (key == "max-connections") {
      cfg.proxy.max_connections = bounded_number(v, key, 1, 1'000'000);
    } else if (key == "decision-ring") {
      cfg.log.ring = bounded_number(v, key, 1, 10'000'000);
    } else if (key == "decision-log-per-client") {
      cfg.set_log_per_client(static_cast<std::uint32_t>(bounded_number(v, key, 0, 1'000'000)));
    } else if (key == "decision-log-max-bytes") {
      cfg.log.max_bytes = bounded_number(v, key, 0, std::uint64_t{1} << 50);
      if (cfg.log.max_bytes != 0 && cfg.log.max_bytes < 65'536) {
        throw ConfigError(key, "must be 0 (no cap) or at least 65536 bytes");
      }
    } else if (key == "decision-log-keep") {
      cfg.log.keep = static_cast<unsigned>(bounded_number(v, key, 1, 100));
    } else if (key == "ask") {
      if (!v.is_boolean()) throw ConfigError(key, "must be true or false");
      cfg.ask.enabled = v.get<bool>();
    } else if (key == "ask-timeout-ms") {
      cfg.ask.timeout = duration_ms(v, key);
    } else if (key == "ask-max-per-client") {
      cfg.ask.max_per_client = bounded_number(v, key, 1, 1'000'000);
    } else if (key == "ask-max") {
      cfg.ask.max_total = bounded_number(v, key, 1, 1'000'000);
    } else if (parse_dns_key(key, v, cfg.dns) || parse_control_key(key, v, cfg.control)) {
      // handled
    } else {
      throw ConfigError(key, "unknown key (see docs/config.md for the keys)");
    }
  }
  if (!have_listen) throw ConfigError("proxy-listen", "is required");
  if (dns_tenants != nullptr) detail::parse_dns_tenants(*dns_tenants, cfg);
  check_control_listen(cfg);
  if (cfg.dns.cache_min_ttl > cfg.dns.cache_max_ttl) {
    throw ConfigError("dns-cache-min-ttl", "is larger than dns-cache-max-ttl");
  }
  // A missing upstream-dns means "the machine's resolvers": main() asks system_resolvers().
  // A list that is present must name at least one server.

  // Validate every rule now, so a bad entry stops the start instead of a later request.
  auto compiled = policy::compile(cfg.rules, 1);
  if (auto* errors = std::get_if<std::vector<policy::RuleError>>(&compiled)) {
    const auto& first = errors->front();
    std::string message = first.message();
    if (errors->size() > 1) message += " (and " + std::to_string(errors->size() - 1) + " more)";
    throw ConfigError(first.list, message);
  }
  return cfg;
}

std::vector<Endpoint> control_listen_or_default(const Config& cfg) {
  if (!cfg.control.listen.empty()) return cfg.control.listen;
  for (const char* text : {"127.0.0.1", "127.0.0.2", "::1"}) {
    const auto addr = *policy::IpAddr::parse(text);
    if (!served_by_listeners(cfg, addr)) return {Endpoint{addr, 0}};
  }
  throw ConfigError("control-listen",
                    "is not set, and every default address (127.0.0.1, 127.0.0.2, ::1) is "
                    "also served by proxy-listen or dns-listen: set it to a host-side address");
}

DescriptorBudget descriptor_budget(const Config& cfg, unsigned threads) {
  DescriptorBudget b;
  b.connections = kDescriptorsPerConnection * cfg.proxy.max_connections;
  if (!cfg.dns.listen.empty()) b.dns_tcp = std::uint64_t{threads} * cfg.dns.max_tcp;
  // Per thread: epoll, its eventfd and timerfd, a spare, the c-ares sockets, a listener per
  // address (proxy, DNS UDP and TCP). Once: the log, the control API, stdio.
  const std::uint64_t listeners = cfg.proxy.listen.size() + 2 * cfg.dns.listen.size();
  b.fixed = 64 + std::uint64_t{threads} * (16 + listeners);
  return b;
}

Config load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("", "cannot read config file \"" + path + "\"");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config(text.str());
}

}  // namespace vibepit::config
