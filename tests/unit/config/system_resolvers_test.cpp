#include "vibepit/config/system_resolvers.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace vibepit::config {
namespace {

std::string addresses(const std::vector<Endpoint>& eps) {
  return to_string(eps);
}

struct ResolvConfCase {
  const char* text;
  const char* want;
};

class ParseResolvConf : public ::testing::TestWithParam<ResolvConfCase> {};

TEST_P(ParseResolvConf, KeepsUsableNameservers) {
  EXPECT_EQ(addresses(parse_resolv_conf(GetParam().text)), GetParam().want)
      << "input: " << GetParam().text;
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParseResolvConf,
    ::testing::Values(
        // Debian's usual file: one server, port 53
        ResolvConfCase{"nameserver 192.0.2.53\n", "192.0.2.53:53"},
        // order kept; IPv6 without brackets; options and search lines ignored
        ResolvConfCase{"search example.com\nnameserver 192.0.2.1\noptions edns0\n"
                       "nameserver 2001:db8::53\n",
                       "192.0.2.1:53 [2001:db8::53]:53"},
        // comments start with # or ;, anywhere on the line
        ResolvConfCase{"# nameserver 192.0.2.9\n; nameserver 192.0.2.8\n"
                       "nameserver 192.0.2.7 # office\n",
                       "192.0.2.7:53"},
        // tabs, CRLF line ends, no final newline
        ResolvConfCase{"nameserver\t192.0.2.1\r\nnameserver 192.0.2.2",
                       "192.0.2.1:53 192.0.2.2:53"},
        // a scoped link-local address cannot be dialled without its interface: skipped
        ResolvConfCase{"nameserver fe80::1%eth0\nnameserver 192.0.2.3\n", "192.0.2.3:53"},
        // names, ports and junk are not addresses
        ResolvConfCase{"nameserver dns.example\nnameserver 192.0.2.1:5353\nnameserver\n"
                       "nameservers 192.0.2.4\nnameserver 192.0.2.5\n",
                       "192.0.2.5:53"},
        // nothing usable at all
        ResolvConfCase{"", ""}, ResolvConfCase{"\n\n#\n", ""}));

class SystemResolversTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vibepit-resolvers-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    files_.resolv_conf = dir_ + "/resolv.conf";
    files_.resolved_upstreams = dir_ + "/resolved.conf";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  std::string dir_;
  ResolverFiles files_;
};

TEST_F(SystemResolversTest, UsesResolvConf) {
  write(files_.resolv_conf, "nameserver 192.0.2.53\nnameserver 192.0.2.54\n");
  auto r = system_resolvers(files_);
  EXPECT_EQ(addresses(r.servers), "192.0.2.53:53 192.0.2.54:53");
  EXPECT_EQ(r.source, files_.resolv_conf);
}

TEST_F(SystemResolversTest, LooksBehindTheSystemdStub) {
  write(files_.resolv_conf, "nameserver 127.0.0.53\noptions edns0 trust-ad\n");
  write(files_.resolved_upstreams, "nameserver 198.51.100.1\nnameserver 2001:db8::1\n");
  auto r = system_resolvers(files_);
  EXPECT_EQ(addresses(r.servers), "198.51.100.1:53 [2001:db8::1]:53");
  EXPECT_NE(r.source.find(files_.resolved_upstreams), std::string::npos) << r.source;
  EXPECT_NE(r.source.find("127.0.0.53"), std::string::npos) << r.source;
}

TEST_F(SystemResolversTest, KeepsTheStubWhenResolvedNamesNoUpstream) {
  // systemd-resolved may run without upstreams of its own (or the file is missing): the
  // stub is then the only thing that can answer.
  write(files_.resolv_conf, "nameserver 127.0.0.53\n");
  auto r = system_resolvers(files_);
  EXPECT_EQ(addresses(r.servers), "127.0.0.53:53");
  EXPECT_NE(r.source.find("names no upstream"), std::string::npos) << r.source;
}

TEST_F(SystemResolversTest, AnotherLocalResolverIsUsedAsIs) {
  // 127.0.0.1 (dnsmasq, unbound) is not the systemd stub: the resolved file is not read.
  write(files_.resolv_conf, "nameserver 127.0.0.1\n");
  write(files_.resolved_upstreams, "nameserver 198.51.100.1\n");
  EXPECT_EQ(addresses(system_resolvers(files_).servers), "127.0.0.1:53");
}

TEST_F(SystemResolversTest, NoServerIsAClearConfigError) {
  write(files_.resolv_conf, "search example.com\n");
  try {
    system_resolvers(files_);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "upstream-dns");
    EXPECT_NE(std::string(e.what()).find("names no usable nameserver"), std::string::npos)
        << e.what();
  }
  files_.resolv_conf = dir_ + "/missing";
  EXPECT_THROW(system_resolvers(files_), ConfigError);
}

}  // namespace
}  // namespace vibepit::config
