#include "vibepit/config/config.hpp"

#include <gtest/gtest.h>

namespace vibepit::config {
namespace {

constexpr const char* kMinimal =
    R"({"proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["203.0.113.2"]})";

TEST(Config, MinimalConfigGetsDefaults) {
  auto cfg = parse_config(kMinimal);
  ASSERT_EQ(cfg.proxy.listen.size(), 1u);
  EXPECT_EQ(cfg.proxy.listen[0].to_string(), "127.0.0.1:0");
  ASSERT_EQ(cfg.upstream_dns().size(), 1u);
  EXPECT_EQ(cfg.upstream_dns()[0].to_string(), "203.0.113.2:53");  // default DNS port
  EXPECT_EQ(cfg.proxy.max_request_head, 16u * 1024);
  EXPECT_EQ(cfg.proxy.header_timeout, std::chrono::seconds(10));
  EXPECT_EQ(cfg.proxy.splice, SpliceMode::automatic);
  EXPECT_EQ(cfg.proxy.tunnel_tls, TunnelTls::check);
  EXPECT_TRUE(cfg.rules.allow_http.empty());  // default deny
  EXPECT_EQ(cfg.rules.mode, policy::Mode::enforce);
}

TEST(Config, AskModeIsOffByDefaultAndTakesItsKeys) {
  auto off = parse_config(R"({"proxy-listen": ["127.0.0.1:0"]})");
  EXPECT_FALSE(off.ask.enabled);
  EXPECT_EQ(off.ask.timeout, std::chrono::seconds(60));
  EXPECT_EQ(off.ask.max_per_client, 64u);
  EXPECT_EQ(off.ask.max_total, 1024u);
  auto on = parse_config(R"({"proxy-listen": ["127.0.0.1:0"], "ask": true,
    "ask-timeout-ms": 5000, "ask-max-per-client": 3, "ask-max": 10})");
  EXPECT_TRUE(on.ask.enabled);
  EXPECT_EQ(on.ask.timeout, std::chrono::milliseconds(5000));
  EXPECT_EQ(on.ask.max_per_client, 3u);
  EXPECT_EQ(on.ask.max_total, 10u);
}

TEST(Config, AuditMode) {
  auto cfg = parse_config(
      R"({"proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["203.0.113.2"], "mode": "audit"})");
  EXPECT_EQ(cfg.rules.mode, policy::Mode::audit);
}

TEST(Config, FullConfig) {
  auto cfg = parse_config(R"({
    "proxy-listen": ["127.0.0.1:3128", "[::1]:3129"],
    "upstream-dns": ["203.0.113.2:5353", "[2001:db8::53]:53"],
    "allow-http": ["example.com:443", "*.example.org:8*"],
    "allow-dns": ["example.com"],
    "block-cidr": ["198.51.100.0/24"],
    "decision-log": "/tmp/x.ndjson", "threads": 3, "splice": "off", "tunnel-tls": "require",
    "inspect-ca-cert-out": "/run/vibepit/ca.pem", "upstream-ca-file": "/etc/corp-ca.pem",
    "header-timeout-ms": 500, "connect-timeout-ms": 600, "idle-timeout-ms": 700,
    "resolve-timeout-ms": 800, "drain-timeout-ms": 900, "max-request-head": 2048,
    "max-response-head": 4096, "max-connections": 50, "decision-ring": 10})");
  EXPECT_EQ(cfg.proxy.listen[1].to_string(), "[::1]:3129");
  EXPECT_EQ(cfg.upstream_dns()[0].port, 5353);
  EXPECT_EQ(cfg.rules.allow_http.size(), 2u);
  EXPECT_EQ(cfg.rules.block_cidr[0], "198.51.100.0/24");
  EXPECT_EQ(cfg.proxy.threads, 3u);
  EXPECT_EQ(cfg.proxy.splice, SpliceMode::off);
  EXPECT_EQ(cfg.proxy.tunnel_tls, TunnelTls::require);
  EXPECT_EQ(cfg.proxy.inspect_ca_cert_out, "/run/vibepit/ca.pem");
  EXPECT_EQ(cfg.proxy.upstream_ca_file, "/etc/corp-ca.pem");
  EXPECT_EQ(cfg.proxy.connect_timeout.count(), 600);
  EXPECT_EQ(cfg.proxy.max_connections, 50u);
  EXPECT_EQ(cfg.log.path, "/tmp/x.ndjson");
  EXPECT_EQ(cfg.log.ring, 10u);
}

// A key that concerns several servers reaches each one's part: upstream-dns the proxy's
// resolver and the DNS forwarder, decision-log-per-client both servers' folding.
TEST(Config, SharedKeysReachEveryPart) {
  auto cfg = parse_config(R"({"proxy-listen": ["127.0.0.1:0"],
    "upstream-dns": ["203.0.113.2:5353", "[2001:db8::53]:53"],
    "decision-log-per-client": 7})");
  ASSERT_EQ(cfg.proxy.upstream_dns.size(), 2u);
  ASSERT_EQ(cfg.dns.upstream.size(), 2u);
  EXPECT_EQ(cfg.dns.upstream[1].to_string(), "[2001:db8::53]:53");
  EXPECT_EQ(cfg.proxy.log_per_client, 7u);
  EXPECT_EQ(cfg.dns.log_per_client, 7u);
  // Absent upstream-dns: both empty, for main() to fill with the machine's resolvers.
  auto bare = parse_config(R"({"proxy-listen": ["127.0.0.1:0"]})");
  EXPECT_TRUE(bare.proxy.upstream_dns.empty());
  EXPECT_TRUE(bare.dns.upstream.empty());
  bare.set_upstream_dns({parse_endpoint("192.0.2.53:53")});
  EXPECT_EQ(bare.dns.upstream.size(), 1u);
  EXPECT_EQ(bare.proxy.upstream_dns.size(), 1u);
}

TEST(Config, DnsKeys) {
  auto dflt = parse_config(kMinimal);
  EXPECT_TRUE(dflt.dns.listen.empty());  // no DNS server unless asked for
  EXPECT_FALSE(dflt.dns.deny_nxdomain);  // REFUSED
  EXPECT_EQ(dflt.dns.qtypes.size(), 11u);
  auto cfg = parse_config(R"({
    "proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["203.0.113.2"],
    "dns-listen": ["127.0.0.1:0", "[::1]:5353"], "dns-deny-rcode": "NXDOMAIN",
    "dns-qtypes": ["A", "AAAA", "TYPE65280"], "dns-cache-entries": 0,
    "dns-cache-min-ttl": 5, "dns-cache-max-ttl": 60, "dns-cache-max-negative-ttl": 30,
    "dns-client-qps": 0, "dns-client-burst": 7, "dns-max-pending": 9, "dns-timeout-ms": 1500,
    "dns-udp-payload": 1400, "dns-tcp-idle-ms": 700, "dns-max-tcp": 3, "dns-max-qname": 100,
    "dns-max-label": 20})");
  ASSERT_EQ(cfg.dns.listen.size(), 2u);
  EXPECT_EQ(cfg.dns.listen[1].to_string(), "[::1]:5353");
  EXPECT_TRUE(cfg.dns.deny_nxdomain);
  EXPECT_EQ(cfg.dns.qtypes, (std::vector<std::uint16_t>{1, 28, 65280}));
  EXPECT_EQ(cfg.dns.cache_entries, 0u);
  EXPECT_EQ(cfg.dns.cache_min_ttl, 5u);
  EXPECT_EQ(cfg.dns.client_qps, 0u);
  EXPECT_EQ(cfg.dns.max_pending, 9u);
  EXPECT_EQ(cfg.dns.timeout.count(), 1500);
  EXPECT_EQ(cfg.dns.udp_payload, 1400);
  EXPECT_EQ(cfg.dns.max_label, 20u);
}

struct BadConfig {
  const char* json;
  const char* key;      // the key the error must name
  const char* message;  // a fragment the message must contain
};

class ConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ConfigErrors, NamesTheKeyAndTheValue) {
  const auto& c = GetParam();
  try {
    parse_config(c.json);
    FAIL() << "accepted: " << c.json;
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), c.key) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
        << "message: " << e.what() << "\nwanted: " << c.message;
  }
}

#define BASE R"("proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["203.0.113.2"])"
INSTANTIATE_TEST_SUITE_P(
    Table, ConfigErrors,
    ::testing::Values(
        // not JSON at all
        BadConfig{"{", "", "not valid JSON"},
        // a number too large for a double is a JSON error, not a crash (found by fuzz_config)
        BadConfig{"{" BASE R"(, "threads": 1e99999})", "", "not valid JSON"},
        // top level must be an object
        BadConfig{"[]", "", "must be a JSON object"},
        // ask mode: a boolean, a time limit of at least 1 ms, bounds of at least 1
        BadConfig{"{" BASE R"(, "ask": "yes"})", "ask", "must be true or false"},
        BadConfig{"{" BASE R"(, "ask-timeout-ms": 0})", "ask-timeout-ms", ""},
        BadConfig{"{" BASE R"(, "ask-max-per-client": 0})", "ask-max-per-client", ""},
        BadConfig{"{" BASE R"(, "ask-max": -1})", "ask-max", ""},
        // typo in a key is caught, not ignored
        BadConfig{"{" BASE R"(, "alow-http": []})", "alow-http", "unknown key"},
        // listen address is required
        BadConfig{R"({"upstream-dns": ["203.0.113.2"]})", "proxy-listen", "is required"},
        // an empty list is a mistake; leaving the key out is how to ask for the system's
        BadConfig{R"({"proxy-listen": ["127.0.0.1:0"], "upstream-dns": []})", "upstream-dns",
                  "must name at least one address"},
        // names are not accepted as listen addresses
        BadConfig{R"({"proxy-listen": ["localhost:3128"], "upstream-dns": ["203.0.113.2"]})",
                  "proxy-listen", "localhost:3128"},
        // port out of range
        BadConfig{R"({"proxy-listen": ["127.0.0.1:65536"], "upstream-dns": ["203.0.113.2"]})",
                  "proxy-listen", "bad port"},
        // listen needs a port
        BadConfig{R"({"proxy-listen": ["127.0.0.1"], "upstream-dns": ["203.0.113.2"]})",
                  "proxy-listen", "missing port"},
        // IPv6 without brackets is ambiguous
        BadConfig{R"({"proxy-listen": ["::1:53"], "upstream-dns": ["203.0.113.2"]})",
                  "proxy-listen", "brackets"},
        // wrong type
        BadConfig{"{" BASE R"(, "allow-http": "example.com:443"})", "allow-http",
                  "list of strings"},
        // invalid rule: names the entry
        BadConfig{"{" BASE R"(, "allow-http": ["ok.com:443", "*:443"]})", "allow-http",
                  "\"*:443\""},
        BadConfig{"{" BASE R"(, "allow-dns": ["a..b"]})", "allow-dns", "a..b"},
        BadConfig{"{" BASE R"(, "block-cidr": ["10.0.0.1/8"]})", "block-cidr", "10.0.0.1/8"},
        // negative and zero timeouts are refused
        BadConfig{"{" BASE R"(, "connect-timeout-ms": -5})", "connect-timeout-ms", "-5"},
        BadConfig{"{" BASE R"(, "header-timeout-ms": 0})", "header-timeout-ms", "out of range"},
        BadConfig{"{" BASE R"(, "max-request-head": 100})", "max-request-head", "out of range"},
        BadConfig{"{" BASE R"(, "threads": "many"})", "threads", "\"many\""},
        BadConfig{"{" BASE R"(, "splice": "always"})", "splice", "\"always\""},
        BadConfig{"{" BASE R"(, "tunnel-tls": "strict"})", "tunnel-tls", "\"strict\""},
        BadConfig{"{" BASE R"(, "tunnel-tls": true})", "tunnel-tls", "true"},
        BadConfig{"{" BASE R"(, "upstream-ca-file": "ca.pem"})", "upstream-ca-file", "absolute"},
        BadConfig{"{" BASE R"(, "upstream-ca-file": 1})", "upstream-ca-file", "absolute"},
        BadConfig{"{" BASE R"(, "inspect-ca-cert-out": ""})", "inspect-ca-cert-out", "absolute"},
        BadConfig{"{" BASE R"(, "mode": "learn"})", "mode", "\"enforce\" or \"audit\""},
        BadConfig{"{" BASE R"(, "mode": true})", "mode", "\"enforce\" or \"audit\""},
        BadConfig{"{" BASE R"(, "decision-log": ""})", "decision-log", "file path"},
        BadConfig{"{" BASE R"(, "dns-listen": ["localhost:53"]})", "dns-listen", "localhost"},
        BadConfig{"{" BASE R"(, "dns-deny-rcode": "SERVFAIL"})", "dns-deny-rcode", "SERVFAIL"},
        BadConfig{"{" BASE R"(, "dns-qtypes": ["A", "BOGUS"]})", "dns-qtypes", "BOGUS"},
        // ANY has its own answer (RFC 8482) and zone transfers are never forwarded
        BadConfig{"{" BASE R"(, "dns-qtypes": ["ANY"]})", "dns-qtypes", "RFC 8482"},
        BadConfig{"{" BASE R"(, "dns-udp-payload": 100})", "dns-udp-payload", "out of range"},
        BadConfig{"{" BASE R"(, "dns-client-burst": 0})", "dns-client-burst", "out of range"},
        BadConfig{"{" BASE R"(, "dns-max-label": 64})", "dns-max-label", "out of range"},
        BadConfig{"{" BASE R"(, "dns-cache-min-ttl": 600, "dns-cache-max-ttl": 60})",
                  "dns-cache-min-ttl", "larger than"},
        // The control API shares no address with the listeners the proxy's clients reach.
        BadConfig{"{" BASE R"(, "control-listen": ["0.0.0.0:8443"]})", "control-listen",
                  "\"0.0.0.0:8443\": an unspecified address"},
        BadConfig{"{" BASE R"(, "control-listen": "[::]:8443"})", "control-listen",
                  "\"[::]:8443\": an unspecified address"},
        BadConfig{"{" BASE R"(, "control-listen": ["127.0.0.2:1", "127.0.0.1:8443"]})",
                  "control-listen",
                  "\"127.0.0.1:8443\": 127.0.0.1 is also served by proxy-listen "
                  "\"127.0.0.1:0\""},
        BadConfig{"{" BASE R"(, "dns-listen": ["[::1]:53"], "control-listen": ["[::1]:9"]})",
                  "control-listen", "::1 is also served by dns-listen \"[::1]:53\""},
        BadConfig{R"({"proxy-listen": ["0.0.0.0:3128"], "control-listen": ["10.1.1.1:9"]})",
                  "control-listen", "is also served by proxy-listen \"0.0.0.0:3128\""},
        BadConfig{"{" BASE R"(, "control-listen": 8443})", "control-listen",
                  "must be a list of strings"},
        // A unix socket: an absolute path that fits sun_path.
        BadConfig{"{" BASE R"(, "control-socket": "run/c.sock"})", "control-socket",
                  "expected an absolute path"},
        BadConfig{"{" BASE R"(, "control-socket": ["/run/c.sock"]})", "control-socket",
                  "expected a string"},
        // Credentials: a public half and one source; never a value.
        BadConfig{"{" BASE R"(, "credentials": {"name": "A"}})", "credentials",
                  "must be a list of objects"},
        BadConfig{"{" BASE R"(, "credentials": [{"name": "A", "host": "a.test:443"}]})",
                  "credentials", "exactly one of from-file and from-env"},
        BadConfig{"{" BASE R"(, "credentials": [{"name": "A", "host": "a.test:443",
                  "from-env": "A", "from-file": "/a"}]})",
                  "credentials", "exactly one of from-file and from-env"},
        BadConfig{"{" BASE R"(, "credentials": [{"name": "A", "host": "a.test:443",
                  "value": "s3cr3t"}]})",
                  "credentials", "a value is never written in the config"},
        BadConfig{"{" BASE R"(, "credentials": [{"name": "A", "host": "a.test:443",
                  "from-file": "rel/path"}]})",
                  "credentials", "absolute path"},
        BadConfig{"{" BASE R"(, "credentials": [{"name": "A", "host": "a.test:443",
                  "header": "Host", "from-env": "A"}]})",
                  "credentials", "not one a credential may set"},
        BadConfig{"{" BASE
                  R"(, "credentials": [{"name": "A", "host": "a.test:443", "from-env": "A"},
                  {"name": "A", "host": "b.test:443", "from-env": "B"}]})",
                  "credentials", "two credentials are named A"},
        BadConfig{"{" BASE
                  R"(, "credentials": [{"name": "A", "host": "a.test:443", "from-env": "A"},
                  {"name": "B", "host": "a.test:443", "from-env": "B"}]})",
                  "credentials", "A and B both set Authorization on a.test:443"}));
#undef BASE

TEST(Config, CredentialsNameTheirSource) {
  auto c = parse_config(R"({"proxy-listen": ["127.0.0.1:0"], "credentials": [
    {"name": "GH", "host": "api.github.com:443", "from-env": "GH_TOKEN"},
    {"name": "PYPI", "host": "upload.pypi.org:443", "format": "basic:__token__",
     "from-file": "/run/secrets/pypi"}]})");
  ASSERT_EQ(c.credentials.size(), 2u);
  EXPECT_EQ(c.credentials[0].spec.text(),
            "GH=api.github.com:443,header=Authorization,format=Bearer {}");
  EXPECT_EQ(c.credentials[0].from_env, "GH_TOKEN");
  EXPECT_EQ(c.credentials[1].from_file, "/run/secrets/pypi");
  EXPECT_EQ(c.credentials[1].spec.format, "basic:__token__");
}

TEST(Config, EndpointParsing) {
  EXPECT_EQ(parse_endpoint("[2001:db8::1]:8053").to_string(), "[2001:db8::1]:8053");
  EXPECT_EQ(parse_endpoint("203.0.113.9", 53).port, 53);
  EXPECT_THROW(parse_endpoint("203.0.113.9:"), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("[::1"), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("127.1:53"), std::invalid_argument);  // not a strict IPv4
}

TEST(Config, EveryListenKeyTakesOneStringOrAList) {
  auto cfg = parse_config(R"({"proxy-listen": "127.0.0.1:3128", "dns-listen": "127.0.0.1:53",
                              "control-listen": "10.1.1.1:8443"})");
  ASSERT_EQ(cfg.proxy.listen.size(), 1u);
  EXPECT_EQ(cfg.proxy.listen[0].to_string(), "127.0.0.1:3128");
  ASSERT_EQ(cfg.dns.listen.size(), 1u);
  EXPECT_EQ(cfg.dns.listen[0].to_string(), "127.0.0.1:53");
  ASSERT_EQ(cfg.control.listen.size(), 1u);
  EXPECT_EQ(cfg.control.listen[0].to_string(), "10.1.1.1:8443");
  // An IPv6 listener does not take the IPv4 address, nor the other way round.
  cfg = parse_config(R"({"proxy-listen": ["[::]:3128"], "control-listen": ["127.0.0.1:9"]})");
  EXPECT_EQ(cfg.control.listen[0].to_string(), "127.0.0.1:9");
}

TEST(Config, AControlSocket) {
  const std::string longest = "/" + std::string(106, 's');
  const std::string base = R"({"proxy-listen": ["127.0.0.1:0"], "control-socket": ")";
  auto cfg = parse_config(base + longest + R"("})");
  EXPECT_EQ(cfg.control.socket, longest);
  EXPECT_TRUE(cfg.control.listen.empty());
  try {
    parse_config(base + longest + R"(s"})");
    ADD_FAILURE() << "a path longer than sun_path was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("longer than the 107 bytes"), std::string::npos)
        << e.what();
  }
}

TEST(Config, TheDefaultControlAddressIsOneNoListenerServes) {
  auto first = [](const char* json) {
    return to_string(control_listen_or_default(parse_config(json)));
  };
  EXPECT_EQ(first(R"({"proxy-listen": ["203.0.113.1:3128"]})"), "127.0.0.1:0");
  EXPECT_EQ(first(R"({"proxy-listen": ["127.0.0.1:3128"]})"), "127.0.0.2:0");
  EXPECT_EQ(first(R"({"proxy-listen": ["127.0.0.1:3128"], "dns-listen": ["127.0.0.2:53"]})"),
            "[::1]:0");
  EXPECT_EQ(first(R"({"proxy-listen": ["127.0.0.1:1"], "control-listen": ["127.0.0.3:9"]})"),
            "127.0.0.3:9");
  auto everywhere = parse_config(R"({"proxy-listen": ["0.0.0.0:3128", "[::]:3128"]})");
  EXPECT_THROW(control_listen_or_default(everywhere), ConfigError);
}

TEST(Config, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config("/nonexistent/vibepit.json"), ConfigError);
}

}  // namespace
}  // namespace vibepit::config

namespace vibepit::config {
namespace {

TEST(DescriptorBudget, CountsWhatEachKeyCanHoldOpen) {
  Config cfg = parse_config(R"({"proxy-listen": ["127.0.0.1:0"], "max-connections": 1000})");
  DescriptorBudget b = descriptor_budget(cfg, 2);
  EXPECT_EQ(b.connections, 6000u);  // two sockets and two pipes each
  EXPECT_EQ(b.dns_tcp, 0u);         // no dns-listen: no DNS clients
  EXPECT_EQ(b.fixed, 64u + 2 * (16 + 1));
  cfg = parse_config(R"({"proxy-listen": ["127.0.0.1:0"], "max-connections": 10,
                         "dns-listen": ["127.0.0.1:0"], "dns-max-tcp": 500})");
  b = descriptor_budget(cfg, 4);
  EXPECT_EQ(b.connections, 60u);
  EXPECT_EQ(b.dns_tcp, 2000u);  // per thread
  EXPECT_EQ(b.total(), 60u + 2000u + 64u + 4 * (16 + 3));
}

}  // namespace
}  // namespace vibepit::config
