#include "vibepit/proxy/config.hpp"

#include <gtest/gtest.h>

namespace vibepit::proxy {
namespace {

constexpr const char* kMinimal =
    R"({"proxy-listen": ["127.0.0.1:0"], "upstream-dns": ["203.0.113.2"]})";

TEST(Config, MinimalConfigGetsDefaults) {
  auto cfg = parse_config(kMinimal);
  ASSERT_EQ(cfg.proxy_listen.size(), 1u);
  EXPECT_EQ(cfg.proxy_listen[0].to_string(), "127.0.0.1:0");
  ASSERT_EQ(cfg.upstream_dns.size(), 1u);
  EXPECT_EQ(cfg.upstream_dns[0].to_string(), "203.0.113.2:53");  // default DNS port
  EXPECT_EQ(cfg.max_request_head, 16u * 1024);
  EXPECT_EQ(cfg.header_timeout, std::chrono::seconds(10));
  EXPECT_EQ(cfg.splice, SpliceMode::automatic);
  EXPECT_TRUE(cfg.rules.allow_http.empty());  // default deny
}

TEST(Config, FullConfig) {
  auto cfg = parse_config(R"({
    "proxy-listen": ["127.0.0.1:3128", "[::1]:3129"],
    "upstream-dns": ["203.0.113.2:5353", "[2001:db8::53]:53"],
    "allow-http": ["example.com:443", "*.example.org:8*"],
    "allow-dns": ["example.com"],
    "block-cidr": ["198.51.100.0/24"],
    "decision-log": "/tmp/x.ndjson", "threads": 3, "splice": "off",
    "header-timeout-ms": 500, "connect-timeout-ms": 600, "idle-timeout-ms": 700,
    "resolve-timeout-ms": 800, "drain-timeout-ms": 900, "max-request-head": 2048,
    "max-response-head": 4096, "max-connections": 50, "decision-ring": 10})");
  EXPECT_EQ(cfg.proxy_listen[1].to_string(), "[::1]:3129");
  EXPECT_EQ(cfg.upstream_dns[0].port, 5353);
  EXPECT_EQ(cfg.rules.allow_http.size(), 2u);
  EXPECT_EQ(cfg.rules.block_cidr[0], "198.51.100.0/24");
  EXPECT_EQ(cfg.threads, 3u);
  EXPECT_EQ(cfg.splice, SpliceMode::off);
  EXPECT_EQ(cfg.connect_timeout.count(), 600);
  EXPECT_EQ(cfg.max_connections, 50u);
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
        // typo in a key is caught, not ignored
        BadConfig{"{" BASE R"(, "alow-http": []})", "alow-http", "unknown key"},
        // listen address is required
        BadConfig{R"({"upstream-dns": ["203.0.113.2"]})", "proxy-listen", "is required"},
        // the host's resolv.conf is never a fallback
        BadConfig{R"({"proxy-listen": ["127.0.0.1:0"]})", "upstream-dns", "is required"},
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
        BadConfig{"{" BASE R"(, "decision-log": ""})", "decision-log", "file path"}));
#undef BASE

TEST(Config, EndpointParsing) {
  EXPECT_EQ(parse_endpoint("[2001:db8::1]:8053").to_string(), "[2001:db8::1]:8053");
  EXPECT_EQ(parse_endpoint("203.0.113.9", 53).port, 53);
  EXPECT_THROW(parse_endpoint("203.0.113.9:"), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("[::1"), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("127.1:53"), std::invalid_argument);  // not a strict IPv4
}

TEST(Config, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config("/nonexistent/vibepit.json"), ConfigError);
}

}  // namespace
}  // namespace vibepit::proxy
