// Authorities and request targets: one row per case, with the reason in a comment.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include <string>

#include "vibepit/http/authority.hpp"

namespace vibepit::http {
namespace {

constexpr std::optional<std::uint16_t> kNoDefault = std::nullopt;

struct AuthorityCase {
  std::string input;
  std::optional<std::uint16_t> default_port;
  std::string host;  // expected host, or "" when an error is expected
  std::uint16_t port;
  bool is_ip;
  std::string error;  // expected error text, when host is ""
};

TEST(Authority, Table) {
  const AuthorityCase cases[] = {
      // plain name and port
      {"example.com:443", kNoDefault, "example.com", 443, false, ""},
      // case is normalised
      {"ExAmple.COM:80", kNoDefault, "example.com", 80, false, ""},
      // one trailing dot is stripped
      {"example.com.:443", kNoDefault, "example.com", 443, false, ""},
      // single label
      {"localhost:8080", kNoDefault, "localhost", 8080, false, ""},
      // underscore and hyphen are allowed in names
      {"_dmarc.my-host.example:25", kNoDefault, "_dmarc.my-host.example", 25, false, ""},
      // a numeric label that is not the last one is a name
      {"127.0.0.1.nip.io:80", kNoDefault, "127.0.0.1.nip.io", 80, false, ""},
      // 0x prefix on a label that is not the last
      {"0x7f.example:80", kNoDefault, "0x7f.example", 80, false, ""},
      // default port applies when none is given
      {"example.com", 80, "example.com", 80, false, ""},
      // an explicit port wins over the default
      {"example.com:8443", 443, "example.com", 8443, false, ""},
      // port bounds
      {"a:1", kNoDefault, "a", 1, false, ""},
      {"a:65535", kNoDefault, "a", 65535, false, ""},
      // leading zeros within five digits are a plain decimal
      {"a:00080", kNoDefault, "a", 80, false, ""},
      // strict dotted quad
      {"203.0.113.7:443", kNoDefault, "203.0.113.7", 443, true, ""},
      {"0.0.0.0:1", kNoDefault, "0.0.0.0", 1, true, ""},
      {"255.255.255.255:1", kNoDefault, "255.255.255.255", 1, true, ""},
      // bracketed IPv6, canonicalised (RFC 5952)
      {"[2001:DB8:0:0:0:0:0:1]:443", kNoDefault, "2001:db8::1", 443, true, ""},
      {"[::1]:80", kNoDefault, "::1", 80, true, ""},
      {"[::ffff:192.0.2.1]:80", kNoDefault, "::ffff:192.0.2.1", 80, true, ""},
      {"[2001:db8::1]", 443, "2001:db8::1", 443, true, ""},
      // every legacy numeric form of 127.0.0.1 that inet_aton would accept
      {"2130706433:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"0x7f.1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"0x7f000001:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"017700000001:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"127.1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"127.0.1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"127.0.0.01:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"0177.0.0.1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"0x7f.0.0.1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"127.0.0.0x1:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      // five parts, and a part above 255
      {"1.2.3.4.5:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"1.2.3.256:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      // an IP with a trailing dot is not canonical
      {"1.2.3.4.:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      // a name whose last label is numeric reads as a number to inet_aton
      {"example.123:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      {"example.0X1f:80", kNoDefault, "", 0, false, "non-canonical IPv4 address"},
      // userinfo is never accepted
      {"user@example.com:80", kNoDefault, "", 0, false, "userinfo not allowed"},
      {"user:pw@example.com:80", kNoDefault, "", 0, false, "userinfo not allowed"},
      // percent-encoding is not allowed in the host
      {"ex%61mple.com:80", kNoDefault, "", 0, false, "percent-encoding not allowed in authority"},
      {"[fe80::1%25eth0]:80", kNoDefault, "", 0, false,
       "percent-encoding not allowed in authority"},
      // empties
      {"", kNoDefault, "", 0, false, "empty authority"},
      {":80", kNoDefault, "", 0, false, "empty host"},
      {".:80", kNoDefault, "", 0, false, "empty host"},
      {"example.com:", kNoDefault, "", 0, false, "empty port"},
      {"example..com:80", kNoDefault, "", 0, false, "empty label in host"},
      {".example.com:80", kNoDefault, "", 0, false, "empty label in host"},
      {"example.com..:80", kNoDefault, "", 0, false, "empty label in host"},
      // missing port without a default
      {"example.com", kNoDefault, "", 0, false, "missing port"},
      {"[::1]", kNoDefault, "", 0, false, "missing port"},
      // bad ports
      {"a:0", kNoDefault, "", 0, false, "port out of range"},
      {"a:65536", kNoDefault, "", 0, false, "port out of range"},
      {"a:000080", kNoDefault, "", 0, false, "port out of range"},
      {"a:+80", kNoDefault, "", 0, false, "invalid port"},
      {"a:-1", kNoDefault, "", 0, false, "invalid port"},
      {"a:8o", kNoDefault, "", 0, false, "invalid port"},
      {"a:80 ", kNoDefault, "", 0, false, "invalid port"},
      // characters outside the reg-name subset
      {"exa mple.com:80", kNoDefault, "", 0, false, "invalid character in host"},
      {"exa*mple.com:80", kNoDefault, "", 0, false, "invalid character in host"},
      {"ex\xc3\xa4mple.com:80", kNoDefault, "", 0, false, "invalid character in host"},
      // a name no rule could be written for: refused by the rule grammar's own check
      {"-foo.example:443", kNoDefault, "", 0, false,
       "invalid host: a label may not start or end with '-'"},
      {"foo-.example:443", kNoDefault, "", 0, false,
       "invalid host: a label may not start or end with '-'"},
      {"a.-b.example:443", kNoDefault, "", 0, false,
       "invalid host: a label may not start or end with '-'"},
      {"_srv.example:443", kNoDefault, "_srv.example", 443, false, ""},
      // an unbracketed IPv6 address
      {"2001:db8::1:80", kNoDefault, "", 0, false, "IPv6 address must be in brackets"},
      {"::1", kNoDefault, "", 0, false, "IPv6 address must be in brackets"},
      // bracket problems
      {"[::1:80", kNoDefault, "", 0, false, "unterminated IPv6 literal"},
      {"[::1]x:80", kNoDefault, "", 0, false, "invalid character after IPv6 literal"},
      {"[1.2.3.4]:80", kNoDefault, "", 0, false, "invalid IPv6 literal"},
      {"[v1.x]:80", kNoDefault, "", 0, false, "invalid IPv6 literal"},
      {"[]:80", kNoDefault, "", 0, false, "invalid IPv6 literal"},
      // label and name length limits
      {std::string(63, 'a') + ".com:80", kNoDefault, std::string(63, 'a') + ".com", 80, false, ""},
      {std::string(64, 'a') + ".com:80", kNoDefault, "", 0, false, "host label too long"},
  };
  for (const auto& c : cases) {
    const auto r = parse_authority(c.input, c.default_port);
    if (c.host.empty()) {
      const auto* e = std::get_if<TargetError>(&r);
      ASSERT_NE(e, nullptr) << c.input;
      EXPECT_EQ(e->what, c.error) << c.input;
      continue;
    }
    const auto* a = std::get_if<Authority>(&r);
    ASSERT_NE(a, nullptr) << c.input << ": " << std::get<TargetError>(r).what;
    EXPECT_EQ(a->host, c.host) << c.input;
    EXPECT_EQ(a->port, c.port) << c.input;
    EXPECT_EQ(a->ip.has_value(), c.is_ip) << c.input;
  }
}

TEST(Authority, NameLength) {
  // 4 labels of 63 plus 3 dots = 255 > 253
  std::string label(63, 'a');
  std::string name = label + "." + label + "." + label + "." + label;
  auto r = parse_authority(name + ":80", std::nullopt);
  ASSERT_TRUE(std::holds_alternative<TargetError>(r));
  EXPECT_EQ(std::get<TargetError>(r).what, "host name too long");
  // exactly 253, also with its trailing dot
  name = label + "." + label + "." + label + "." + std::string(61, 'b');
  ASSERT_EQ(name.size(), 253u);
  EXPECT_TRUE(std::holds_alternative<Authority>(parse_authority(name + ":80", std::nullopt)));
  EXPECT_TRUE(std::holds_alternative<Authority>(parse_authority(name + ".:80", std::nullopt)));
  EXPECT_TRUE(std::holds_alternative<TargetError>(parse_authority(name + "b:80", std::nullopt)));
}

TEST(Authority, Display) {
  auto a = std::get<Authority>(parse_authority("Example.com.:443", std::nullopt));
  EXPECT_EQ(a.display(), "example.com:443");
  a = std::get<Authority>(parse_authority("[2001:db8:0::1]:8080", std::nullopt));
  EXPECT_EQ(a.display(), "[2001:db8::1]:8080");
  a = std::get<Authority>(parse_authority("192.0.2.1:80", std::nullopt));
  EXPECT_EQ(a.display(), "192.0.2.1:80");
}

struct TargetCase {
  std::string method;
  std::string target;
  bool ok;
  TargetForm form;
  std::string scheme;
  std::string host;
  std::uint16_t port;
  std::string path;
  std::string error;
};

constexpr auto kAuth = TargetForm::authority;
constexpr auto kAbs = TargetForm::absolute;
constexpr auto kOrig = TargetForm::origin;
constexpr auto kStar = TargetForm::asterisk;

const TargetCase kTargetCases[] = {
    // CONNECT needs authority-form with a port
    {"CONNECT", "example.com:443", true, kAuth, "", "example.com", 443, "", ""},
    {"CONNECT", "[2001:db8::1]:443", true, kAuth, "", "2001:db8::1", 443, "", ""},
    {"CONNECT", "example.com", false, kAuth, "", "", 0, "", "missing port"},
    {"CONNECT", "http://example.com/", false, kAuth, "", "", 0, "", "invalid port"},
    {"CONNECT", "/", false, kAuth, "", "", 0, "", "invalid character in host"},
    {"CONNECT", "127.1:443", false, kAuth, "", "", 0, "", "non-canonical IPv4 address"},
    // absolute form, http default port
    {"GET", "http://example.com/a/b?c=d", true, kAbs, "http", "example.com", 80, "/a/b?c=d", ""},
    // https default port, scheme lower-cased
    {"GET", "HTTPS://Example.com", true, kAbs, "https", "example.com", 443, "/", ""},
    // explicit port
    {"POST", "http://example.com:8080/x", true, kAbs, "http", "example.com", 8080, "/x", ""},
    // query without a path
    {"GET", "http://example.com?q=1", true, kAbs, "http", "example.com", 80, "/?q=1", ""},
    // IPv6 literal
    {"GET", "http://[::1]:8080/", true, kAbs, "http", "::1", 8080, "/", ""},
    // other schemes parse; the caller decides whether to refuse them
    {"GET", "ftp://example.com:21/f", true, kAbs, "ftp", "example.com", 21, "/f", ""},
    {"GET", "ws+x.y-z://example.com:1", true, kAbs, "ws+x.y-z", "example.com", 1, "/", ""},
    // an unknown scheme has no default port
    {"GET", "ftp://example.com/f", false, kAbs, "", "", 0, "", "missing port"},
    // userinfo in an absolute URI
    {"GET", "http://user@example.com/", false, kAbs, "", "", 0, "", "userinfo not allowed"},
    // a fragment is never sent by a client
    {"GET", "http://example.com/#frag", false, kAbs, "", "", 0, "",
     "fragment not allowed in target"},
    {"GET", "/a#b", false, kOrig, "", "", 0, "", "fragment not allowed in target"},
    // empty authority
    {"GET", "http:///x", false, kAbs, "", "", 0, "", "empty host"},
    // not a URI at all
    {"GET", "example.com:80", false, kAbs, "", "", 0, "", "invalid request target"},
    {"GET", "http:/x", false, kAbs, "", "", 0, "", "invalid request target"},
    {"GET", "1http://x/", false, kAbs, "", "", 0, "", "invalid request target"},
    {"GET", "", false, kAbs, "", "", 0, "", "empty request target"},
    {"GET", "/a b", false, kOrig, "", "", 0, "", "invalid character in request target"},
    // numeric host in absolute form
    {"GET", "http://2130706433/", false, kAbs, "", "", 0, "", "non-canonical IPv4 address"},
    // origin form keeps the path and query as sent
    {"GET", "/index.html?x=1", true, kOrig, "", "", 0, "/index.html?x=1", ""},
    {"GET", "//double", true, kOrig, "", "", 0, "//double", ""},
    // asterisk form only with OPTIONS
    {"OPTIONS", "*", true, kStar, "", "", 0, "", ""},
    {"GET", "*", false, kStar, "", "", 0, "", "asterisk-form is only valid with OPTIONS"},
};

TEST(Target, Table) {
  for (const auto& c : kTargetCases) {
    const auto r = parse_target(c.method, c.target);
    if (!c.ok) {
      const auto* e = std::get_if<TargetError>(&r);
      ASSERT_NE(e, nullptr) << c.method << " " << c.target;
      EXPECT_EQ(e->what, c.error) << c.method << " " << c.target;
      continue;
    }
    const auto* t = std::get_if<Target>(&r);
    ASSERT_NE(t, nullptr) << c.target << ": " << std::get<TargetError>(r).what;
    EXPECT_EQ(t->form, c.form) << c.target;
    EXPECT_EQ(t->scheme, c.scheme) << c.target;
    EXPECT_EQ(t->authority.host, c.host) << c.target;
    EXPECT_EQ(t->authority.port, c.port) << c.target;
    EXPECT_EQ(t->path, c.path) << c.target;
  }
}

// A connection parses every request's target into one Target. Each parse must give what a
// fresh one gives, whatever the last left behind (an IPv6 literal's address, a scheme, a
// path), in either order through the table.
TEST(Target, AuthorityTextKeepsNoPathQueryOrCredential) {
  const struct {
    const char* target;
    const char* want;
  } cases[] = {
      {"http://user:token@a.test/p?q=secret", "a.test"},   // userinfo dropped
      {"http://a.test:8080/p?q=secret#f", "a.test:8080"},  // path, query, fragment dropped
      {"http://a.test?q=secret", "a.test"},                // a query straight after the host
      {"ftp://a@b@c.test/x", "c.test"},                    // the last '@' ends userinfo
      {"/path?q=secret", ""},                              // origin form: no authority
      {"*", ""},                                           // asterisk form
      {"", ""},                                            // nothing at all
      {"-bad.test:443", "-bad.test:443"},                  // CONNECT's authority form
      {"user:pw@-bad.test:443", "-bad.test:443"},          // ... with userinfo
      {"http://", ""},                                     // a scheme and nothing
  };
  for (const auto& c : cases) EXPECT_EQ(authority_text(c.target), c.want) << c.target;
  EXPECT_EQ(authority_text("http://" + std::string(1000, 'a')).size(), 256u);
}

TEST(Target, OneReusedTargetGivesWhatAFreshOneGives) {
  std::vector<const TargetCase*> order;
  for (const auto& c : kTargetCases) order.push_back(&c);
  for (int pass = 0; pass < 2; ++pass) {
    Target reused;
    for (const TargetCase* c : order) {
      const auto fresh = parse_target(c->method, c->target);
      const auto error = parse_target(c->method, c->target, reused);
      ASSERT_EQ(error.has_value(), std::holds_alternative<TargetError>(fresh)) << c->target;
      if (error) {
        EXPECT_EQ(error->what, std::get<TargetError>(fresh).what) << c->target;
        continue;
      }
      const auto& t = std::get<Target>(fresh);
      EXPECT_EQ(reused.form, t.form) << c->target;
      EXPECT_EQ(reused.scheme, t.scheme) << c->target;
      EXPECT_EQ(reused.authority.host, t.authority.host) << c->target;
      EXPECT_EQ(reused.authority.ip, t.authority.ip) << c->target;
      EXPECT_EQ(reused.authority.port, t.authority.port) << c->target;
      EXPECT_EQ(reused.path, t.path) << c->target;
    }
    std::reverse(order.begin(), order.end());
  }
}

TEST(Target, AReusedTargetKeepsItsCapacity) {
  Target t;
  ASSERT_FALSE(parse_target("GET", "http://registry.packages.example.test:8080/v2/a/b?c=d", t));
  const char* host = t.authority.host.data();
  const char* path = t.path.data();
  ASSERT_FALSE(parse_target("GET", "http://Registry.Packages.Example.Test:8080/v2/x", t));
  EXPECT_EQ(t.authority.host, "registry.packages.example.test");
  EXPECT_EQ(t.path, "/v2/x");
  EXPECT_EQ(t.authority.host.data(), host) << "the host went into the buffer it had";
  EXPECT_EQ(t.path.data(), path) << "and so did the path";
}

TEST(Authority, ParsedIntoOneObjectAsFreshly) {
  Authority a;
  ASSERT_FALSE(parse_authority("[2001:db8::1]:443", std::nullopt, a));
  EXPECT_TRUE(a.ip.has_value());
  ASSERT_FALSE(parse_authority("Example.COM.", std::uint16_t{80}, a));
  EXPECT_EQ(a.host, "example.com");
  EXPECT_FALSE(a.ip.has_value()) << "the last literal's address is gone";
  EXPECT_EQ(a.port, 80);
  const auto bad = parse_authority("example.com", std::nullopt, a);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->what, "missing port");
}

}  // namespace
}  // namespace vibepit::http
