#pragma once
// vibepit-proxy configuration: a JSON file, validated completely before anything starts. Each
// server takes its own part (ProxyConfig, DnsConfig, ControlConfig, LogConfig), not the
// whole; what concerns several (listeners that must not overlap, the descriptor budget)
// takes the whole Config.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vibepit/policy/credential.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::config {

struct Endpoint {
  policy::IpAddr addr;
  std::uint16_t port = 0;
  std::string to_string() const;  // "1.2.3.4:53" or "[::1]:53"
};

// "1.2.3.4:53 [::1]:53": a list of endpoints for logs and messages.
std::string to_string(const std::vector<Endpoint>& endpoints);

// "ADDR:PORT" with ADDR an IP literal (IPv6 in brackets). When default_port is non-zero the
// port may be left out. Throws std::invalid_argument with a short reason.
Endpoint parse_endpoint(std::string_view text, std::uint16_t default_port = 0);

enum class SpliceMode { off, automatic };

// The SNI check on CONNECT tunnels (docs/config.md "tunnel-tls"). check: a ClientHello must
// name the CONNECT host; require: also, the first bytes must be a ClientHello with a name.
enum class TunnelTls { off, check, require };

// The DNS server's settings (keys dns-*). The server runs only when `listen` is not empty.
struct DnsConfig {
  std::vector<Endpoint> listen;
  std::vector<Endpoint> upstream;  // where misses are forwarded (Config::set_upstream_dns)
  bool deny_nxdomain = false;      // dns-deny-rcode: REFUSED (default) or NXDOMAIN
  // dns-qtypes: what an allowlisted name may ask for. The default, the one list of it:
  // A, AAAA, CNAME, HTTPS, SVCB, MX, TXT, SRV, NS, SOA, PTR.
  std::vector<std::uint16_t> qtypes = {1, 28, 5, 65, 64, 15, 16, 33, 2, 6, 12};
  std::size_t cache_entries = 10'000;
  std::uint32_t cache_min_ttl = 0;
  std::uint32_t cache_max_ttl = 86'400;
  std::uint32_t cache_max_negative_ttl = 3'600;
  std::uint32_t client_qps = 1'000;  // 0: no limit
  std::uint32_t client_burst = 2'000;
  std::size_t max_pending = 1'024;  // upstream queries in flight, per I/O thread
  std::chrono::milliseconds timeout{2'000};
  std::uint16_t udp_payload = 1'232;
  std::chrono::milliseconds tcp_idle{10'000};
  std::size_t max_tcp = 1'000;
  std::size_t max_qname = 253;  // text length of a query name; longer ones are refused
  std::size_t max_label = 63;
  std::uint32_t log_per_client = 100;  // as ProxyConfig::log_per_client
  // dns-tenants: source ranges whose clients are one tenant, the most specific range first.
  // A client in none of them is answered for the top-level names and every tenant's, unless
  // there are ranges: then for the top-level names alone (docs/fleet.md).
  std::vector<std::pair<policy::Cidr, policy::TenantId>> tenant_ranges;
};

// The tenant a DNS client at `addr` is answered as: its range's, kEveryTenant when no range
// is configured, kNoTenant when ranges are and none holds it.
policy::TenantId dns_tenant(const DnsConfig& cfg, const policy::IpAddr& addr);

// The control API's settings (keys control-*). It runs when `listen` or `socket` is set, or
// when vibepit-proxy is given a session directory (then on 127.0.0.1:0 unless `socket` is).
struct ControlConfig {
  std::vector<Endpoint> listen;
  std::string socket;  // control-socket: a unix socket's absolute path (then no TCP default)
  std::size_t max_clients = 16;  // concurrent connections; more are closed at once
  std::uint32_t rate = 500;      // requests per second across clients; 0: no limit
  std::uint32_t burst = 1'000;
  std::size_t max_body = 1024 * 1024;
  std::size_t max_entries = 1'000;            // rule entries in one request
  std::chrono::milliseconds timeout{10'000};  // handshake, request and write deadline
  std::chrono::milliseconds idle{60'000};     // keep-alive between requests
  std::uint32_t cert_lifetime_hours = 24 * 7;
  std::size_t stats_hosts = 1'000;  // distinct host names counted one by one in /v1/stats
};

// The HTTP proxy's settings: its listeners, I/O threads, deadlines and bounds.
struct ProxyConfig {
  std::vector<Endpoint> listen;        // proxy-listen
  std::vector<Endpoint> upstream_dns;  // the resolver's servers (see Config::set_upstream_dns)
  unsigned threads = 0;                // 0 = one per core; the DNS server runs on them too
  SpliceMode splice = SpliceMode::automatic;
  TunnelTls tunnel_tls = TunnelTls::check;
  // TLS inspection (docs/config.md "Inspection"): where the inspection CA's certificate is
  // written at start (empty: nowhere), and the PEM bundle trusted for upstreams beside the
  // machine's store (empty: none).
  std::string inspect_ca_cert_out;
  std::string upstream_ca_file;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds idle_timeout{300'000};
  std::chrono::milliseconds resolve_timeout{3'000};
  std::chrono::milliseconds drain_timeout{10'000};
  std::size_t max_request_head = 16 * 1024;
  std::size_t max_response_head = 64 * 1024;
  std::size_t max_connections = 10'000;
  // Deny records written whole per client per second; the rest are folded into one summary
  // record per client per second (RecordFolder). 0: deny records are never folded. The
  // one key decision-log-per-client sets it here and in DnsConfig: each server folds the
  // records of its own threads.
  std::uint32_t log_per_client = 100;
};

// Ask mode (keys ask*): a request that no rule allows is held, instead of refused, until an
// allow covers it, the user refuses it or `timeout` passes (runtime/pending.hpp). The
// control API changes `enabled` and `timeout` at runtime.
struct AskConfig {
  bool enabled = false;                       // ask
  std::chrono::milliseconds timeout{60'000};  // ask-timeout-ms
  std::size_t max_per_client = 64;            // ask-max-per-client: held at once, per address
  std::size_t max_total = 1'024;              // ask-max: held at once, in all
};

// The decision log's settings (keys decision-*).
struct LogConfig {
  std::string path = "-";  // decision-log: a file, or "-" for stdout
  std::size_t ring = 10'000;
  // The file is rotated past this size (0: never), keeping this many old files.
  std::uint64_t max_bytes = 100ull << 20;
  unsigned keep = 3;
};

// A credential (key credentials, docs/credentials.md): its public half, and where its value
// is read. The config never holds a value.
struct CredentialConfig {
  policy::CredentialSpec spec;
  std::string from_file;  // read at start and on SIGHUP; the file is left as it is
  std::string from_env;   // read at start, then removed from the process's environment
};

// A tenant of a shared gateway (key tenants, docs/fleet.md): its name and where its token is
// read (at start and on SIGHUP). Its rules are in Config::rules.tenants, in the same order.
struct TenantConfig {
  std::string name;
  std::string token_file;  // an absolute path; the token is never in the config
};

struct Config {
  ProxyConfig proxy;
  DnsConfig dns;
  ControlConfig control;
  LogConfig log;
  AskConfig ask;
  policy::RuleSet rules;
  std::vector<CredentialConfig> credentials;
  std::vector<TenantConfig> tenants;
  // log-format: the appliance's own log on standard error, "text" or "json".
  std::string log_format = "text";
  // health-listen: liveness and readiness over plain HTTP (runtime/health.hpp). Empty: none.
  std::vector<Endpoint> health_listen;
  // rules-file: watched, and applied on every change (rules_file.hpp, docs/fleet.md). Empty:
  // none.
  std::string rules_file;

  // upstream-dns, or the machine's resolvers when it is absent: the proxy's resolver and the
  // DNS server's forwarder both use them.
  const std::vector<Endpoint>& upstream_dns() const { return proxy.upstream_dns; }
  void set_upstream_dns(std::vector<Endpoint> servers) {
    dns.upstream = servers;
    proxy.upstream_dns = std::move(servers);
  }
  // decision-log-per-client, for both servers.
  void set_log_per_client(std::uint32_t n) { proxy.log_per_client = dns.log_per_client = n; }
};

// Where the control API listens: control-listen, or else the first of 127.0.0.1:0,
// 127.0.0.2:0 and [::1]:0 that no proxy-listen or dns-listen address serves. Throws
// ConfigError when there is none.
std::vector<Endpoint> control_listen_or_default(const Config& cfg);

// The most descriptors a configuration can hold open at once, by where they go.
struct DescriptorBudget {
  std::uint64_t connections = 0;  // max-connections: two sockets and, splicing, two pipes each
  std::uint64_t dns_tcp = 0;      // dns-max-tcp on each of the threads
  std::uint64_t fixed = 0;        // listeners, event loops, resolvers, spares, the log
  std::uint64_t total() const { return connections + dns_tcp + fixed; }
};
inline constexpr std::uint64_t kDescriptorsPerConnection = 6;
// `threads` is the number of I/O threads that will run (threads: 0 resolved to the cores).
DescriptorBudget descriptor_budget(const Config& cfg, unsigned threads);

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

}  // namespace vibepit::config
