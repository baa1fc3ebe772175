// The rule grammar: what each list accepts, its canonical text, and the exact messages.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "vibepit/policy/rules.hpp"

namespace vibepit::policy {
namespace {

// The canonical text of a parsed entry, or the message of the error.
template <class Result>
std::string outcome(const Result& r) {
  if (auto* err = std::get_if<RuleError>(&r)) return "error: " + err->message();
  return std::visit(
      [](const auto& v) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, RuleError>) {
          return {};
        } else if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Cidr>) {
          return v.to_string();
        } else {
          return v.text;
        }
      },
      r);
}

struct Case {
  std::string entry;
  std::string expected;  // canonical text, or "error: <message>"
};

const std::string kStar = "'*' must be a whole label at the start (\"*.example.com\")";

TEST(GrammarTest, AllowDns) {
  const std::string h = "error: allow-dns entry \"";
  const std::string label63(63, 'a');
  const std::string label64(64, 'a');
  // 4 labels of 63 + 3 dots = 255; trim to exactly 253 and 254.
  const std::string name253 = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  const std::string name254 = name253 + "b";
  const Case cases[] = {
      {"example.com", "example.com"},                      // exact name
      {"*.example.com", "*.example.com"},                  // wildcard
      {"Example.COM", "example.com"},                      // case-insensitive
      {"example.com.", "example.com"},                     // one trailing dot ignored
      {"*.Example.com.", "*.example.com"},                 // both at once
      {"com", "com"},                                      // single label
      {"*.com", "*.com"},                                  // wildcard over a TLD
      {"_dmarc.example.com", "_dmarc.example.com"},        // underscore allowed
      {"xn--bcher-kva.example", "xn--bcher-kva.example"},  // punycode
      {"a-b.example.com", "a-b.example.com"},              // inner hyphen
      {"1password.com", "1password.com"},                  // leading digit
      {"example.0xg", "example.0xg"},                      // not hex, so a name
      {label63 + ".com", label63 + ".com"},                // 63-octet label
      {name253, name253},                                  // 253-octet name
      {"", h + "\": empty entry"},                         // empty
      {"*", h + "*\": a bare '*' would allow every name; use a domain such as \"*.example.com\""},
      {"*.", h + "*.\": empty label in domain"},                          // wildcard over nothing
      {".", h + ".\": empty label in domain"},                            // root only
      {"example.com..", h + "example.com..\": empty label in domain"},    // two trailing dots
      {".example.com", h + ".example.com\": empty label in domain"},      // leading dot
      {"a..com", h + "a..com\": empty label in domain"},                  // empty inner label
      {"foo*.com", h + "foo*.com\": " + kStar},                           // '*' inside a label
      {"a.*.com", h + "a.*.com\": " + kStar},                             // '*' as an inner label
      {"*foo.com", h + "*foo.com\": " + kStar},                           // '*' glued to a label
      {"**.com", h + "**.com\": " + kStar},                               // double star
      {"*.*.com", h + "*.*.com\": " + kStar},                             // two wildcards
      {"example.com ", h + "example.com \": whitespace is not allowed"},  // trailing space
      {"exa mple.com", h + "exa mple.com\": whitespace is not allowed"},  // inner space
      {"\texample.com", h + "\\x09example.com\": whitespace is not allowed"},  // tab, escaped
      {"b\xc3\xbc"
       "cher.example",
       h + "b\\xc3\\xbccher.example\": non-ASCII name; IDNs must be given in punycode "
           "(\"xn--...\")"},                                       // UTF-8 name
      {name254, h + name254 + "\": name longer than 253 octets"},  // too long
      {"*." + std::string(250, 'a') + ".c",
       h + "*." + std::string(250, 'a') + ".c\": name longer than 253 octets"},  // 254 with *.
      {label64 + ".com", h + label64 + ".com\": label longer than 63 octets"},   // long label
      {"-foo.com", h + "-foo.com\": a label may not start or end with '-'"},     // leading hyphen
      {"foo-.com", h + "foo-.com\": a label may not start or end with '-'"},     // trailing hyphen
      {"ex!ample.com",
       h + "ex!ample.com\": invalid character '!' in domain (letters, digits, '-' and '_' only)"},
      {"ex\"ample.com",
       h + "ex\\\"ample.com\": invalid character '\"' in domain (letters, digits, '-' and '_' "
           "only)"},  // a quote is escaped in the entry
      {"example.com:443",
       h + "example.com:443\": invalid character ':' in domain (letters, digits, '-' and '_' "
           "only)"},                                                  // a port has no place here
      {"127.1", h + "127.1\": not a valid IP address or host name"},  // short IPv4
      {"0x7f.0.0.1", h + "0x7f.0.0.1\": not a valid IP address or host name"},      // hex IPv4
      {"2130706433", h + "2130706433\": not a valid IP address or host name"},      // integer
      {"example.0x1f", h + "example.0x1f\": not a valid IP address or host name"},  // hex TLD
      {"010.0.0.1", h + "010.0.0.1\": not a valid IP address or host name"},        // octal part
      {"*.1.2.3.4", h + "*.1.2.3.4\": not a valid IP address or host name"},        // wildcard IP
      {"203.0.113.7", h + "203.0.113.7\": an IP address is not a DNS name"},        // a literal
  };
  for (const auto& c : cases) {
    EXPECT_EQ(outcome(parse_dns_rule(c.entry)), c.expected) << c.entry;
  }
}

TEST(GrammarTest, AllowHttp) {
  const std::string h = "error: allow-http entry \"";
  const Case cases[] = {
      {"example.com:443", "example.com:443"},                    // exact name and port
      {"*.example.com:443", "*.example.com:443"},                // wildcard
      {"Example.COM.:443", "example.com:443"},                   // case and trailing dot
      {"example.com:8*", "example.com:8*"},                      // port glob
      {"example.com:*", "example.com:*"},                        // any port
      {"example.com:8**", "example.com:8*"},                     // runs of '*' collapse
      {"example.com:4*3", "example.com:4*3"},                    // inner glob
      {"example.com:1", "example.com:1"},                        // lowest port
      {"example.com:65535", "example.com:65535"},                // highest port
      {"example.com:6553*", "example.com:6553*"},                // matches 6553 and 65530..65535
      {"203.0.113.7:443", "203.0.113.7:443"},                    // IPv4 literal
      {"203.0.113.7.:443", "203.0.113.7:443"},                   // trailing dot on a literal
      {"[2001:db8::1]:443", "[2001:db8::1]:443"},                // IPv6 literal
      {"[2001:DB8:0::1]:8*", "[2001:db8::1]:8*"},                // IPv6 canonical text
      {"[::ffff:203.0.113.7]:443", "[::ffff:203.0.113.7]:443"},  // mapped, public
      {"100.64.0.1:443", "100.64.0.1:443"},  // default-blocked only: refused at decision time
      {"", h + "\": empty entry"},           // empty
      {"*:443", h + "*:443\": a bare '*' would allow every name; use a domain such as "
                    "\"*.example.com\""},                 // bare star
      {"*.:443", h + "*.:443\": empty label in domain"},  // the header's example
      {"foo*.com:443", h + "foo*.com:443\": " + kStar},   // the example
      {"a.*.com:443", h + "a.*.com:443\": " + kStar},     // inner wildcard
      {"example.com", h + "example.com\": missing port (expected DOMAIN:PORT)"},  // no port
      {"example.com:", h + "example.com:\": empty port"},                         // empty port
      {":443", h + ":443\": empty domain"},                                       // empty domain
      {"example.com:https",
       h + "example.com:https\": bad port \"https\": digits and '*' only"},  // service name
      {"example.com:-1", h + "example.com:-1\": bad port \"-1\": digits and '*' only"},
      {"example.com:0", h + "example.com:0\": port 0 is not allowed"},  // port 0
      {"example.com:65536", h + "example.com:65536\": port 65536 out of range (1-65535)"},
      {"example.com:100000", h + "example.com:100000\": port 100000 out of range (1-65535)"},
      {"example.com:123456789012",
       h + "example.com:123456789012\": port 123456789012 out of range (1-65535)"},
      {"example.com:44\x01",
       h + "example.com:44\\x01\": bad port \"44\\x01\": digits and '*' only"},  // escaped
      {"example.com:0443", h + "example.com:0443\": bad port \"0443\": leading zero"},
      {"example.com:0*", h + "example.com:0*\": port glob \"0*\" matches no port in 1-65535"},
      {"example.com:99999*",
       h + "example.com:99999*\": port glob \"99999*\" matches no port in 1-65535"},
      {"example.com:9*9*9*9*9",
       h + "example.com:9*9*9*9*9\": port glob \"9*9*9*9*9\" matches no port in 1-65535"},
      {"example.com:1*2*3*4*5*6*",
       h + "example.com:1*2*3*4*5*6*\": bad port \"1*2*3*4*5*6*\": too long"},
      {"example.com :443", h + "example.com :443\": whitespace is not allowed (but for the "
                               "single spaces of DOMAIN:PORT METHODS PATH)"},          // space
      {"example.com:443\n", h + "example.com:443\\x0a\": whitespace is not allowed"},  // LF
      {"127.0.0.1:443",
       h + "127.0.0.1:443\": address 127.0.0.1 is in the always-blocked range 127.0.0.0/8 "
           "(loopback)"},  // loopback literal
      {"10.1.2.3:80",
       h + "10.1.2.3:80\": address 10.1.2.3 is in the always-blocked range 10.0.0.0/8 "
           "(private)"},  // private literal
      {"169.254.169.254:80",
       h + "169.254.169.254:80\": address 169.254.169.254 is in the always-blocked range "
           "169.254.0.0/16 (link-local)"},  // cloud metadata
      {"[::1]:443",
       h + "[::1]:443\": address ::1 is in the always-blocked range ::1/128 (loopback)"},
      {"[fd00::1]:443",
       h + "[fd00::1]:443\": address fd00::1 is in the always-blocked range fc00::/7 "
           "(unique-local)"},
      {"[::ffff:127.0.0.1]:443",
       h + "[::ffff:127.0.0.1]:443\": address ::ffff:127.0.0.1 embeds 127.0.0.1, which is in "
           "the always-blocked range 127.0.0.0/8 (loopback)"},                // mapped loopback
      {"127.1:443", h + "127.1:443\": not a valid IP address or host name"},  // short form
      {"0x7f.0.0.1:443", h + "0x7f.0.0.1:443\": not a valid IP address or host name"},
      {"2001:db8::1:443", h + "2001:db8::1:443\": an IPv6 address must be in brackets, e.g. "
                              "\"[2001:db8::1]:443\""},  // unbracketed IPv6
      {"example.com:443:443", h + "example.com:443:443\": not a valid IP address or host name"},
      {"[2001:db8::1:443", h + "[2001:db8::1:443\": missing ']' after IPv6 address"},
      {"[2001:db8::1]", h + "[2001:db8::1]\": missing port (expected [IPV6]:PORT)"},
      {"[2001:db8::1]443", h + "[2001:db8::1]443\": expected ':PORT' after ']'"},
      {"[203.0.113.7]:443", h + "[203.0.113.7]:443\": not a valid IPv6 address in brackets"},
      {"[fe80::1%eth0]:443", h + "[fe80::1%eth0]:443\": not a valid IPv6 address in brackets"},
      {"[example.com]:443", h + "[example.com]:443\": not a valid IPv6 address in brackets"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(outcome(parse_http_rule(c.entry)), c.expected) << c.entry;
  }
}

TEST(GrammarTest, HttpRuleFields) {
  auto name = std::get<HttpRule>(parse_http_rule("*.Example.com:8*"));
  EXPECT_EQ(name.kind, HttpRule::Kind::domain);
  EXPECT_TRUE(name.domain.wildcard);
  EXPECT_EQ(name.domain.name, "example.com");
  EXPECT_EQ(name.port_glob, "8*");
  auto ip = std::get<HttpRule>(parse_http_rule("[2001:db8::1]:443"));
  EXPECT_EQ(ip.kind, HttpRule::Kind::ip);
  EXPECT_EQ(ip.ip, *IpAddr::parse("2001:db8::1"));
  EXPECT_EQ(ip.port_glob, "443");
}

TEST(GrammarTest, BlockCidr) {
  const std::string h = "error: block-cidr entry \"";
  const Case cases[] = {
      {"203.0.113.0/24", "203.0.113.0/24"},  // IPv4
      {"2001:DB8::/32", "2001:db8::/32"},    // IPv6, canonical text
      {"0.0.0.0/0", "0.0.0.0/0"},            // everything is allowed to be blocked
      {"", h + "\": empty entry"},           // empty
      {"203.0.113.0 /24", h + "203.0.113.0 /24\": whitespace is not allowed"},
      {"203.0.113.0", h + "203.0.113.0\": missing prefix length (expected ADDRESS/PREFIX, e.g. "
                          "\"203.0.113.0/24\")"},
      {"203.0.113/24", h + "203.0.113/24\": \"203.0.113\" is not a valid IP address"},
      {"example.com/24", h + "example.com/24\": \"example.com\" is not a valid IP address"},
      {"203.0.113.0/", h + "203.0.113.0/\": bad prefix length \"\""},
      {"203.0.113.0/024", h + "203.0.113.0/024\": bad prefix length \"024\""},
      {"203.0.113.0/x", h + "203.0.113.0/x\": bad prefix length \"x\""},
      {"203.0.113.0/\x7f", h + "203.0.113.0/\\x7f\": bad prefix length \"\\x7f\""},  // DEL
      {"203.0.113.0/33", h + "203.0.113.0/33\": prefix length 33 out of range for IPv4 (0-32)"},
      {"::/129", h + "::/129\": prefix length 129 out of range for IPv6 (0-128)"},
      {"203.0.113.7/24", h + "203.0.113.7/24\": host bits set; did you mean \"203.0.113.0/24\"?"},
      {"2001:db8::1/32", h + "2001:db8::1/32\": host bits set; did you mean \"2001:db8::/32\"?"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(outcome(parse_block_cidr(c.entry)), c.expected) << c.entry;
  }
}

TEST(GrammarTest, NormalizeName) {
  EXPECT_EQ(normalize_name("Example.COM."), "example.com");
  EXPECT_EQ(normalize_name("example.com"), "example.com");
  EXPECT_EQ(normalize_name("example.com.."), "example.com.");  // only one dot
  std::string into = "a much longer name than the next one.example";
  normalize_name("Short.TEST.", into);
  EXPECT_EQ(into, "short.test") << "replaced, not appended";
  EXPECT_EQ(normalize_name(""), "");
}

TEST(GrammarTest, PortGlobMatches) {
  struct PortCase {
    std::string_view glob;
    std::uint16_t port;
    bool match;
  } cases[] = {
      {"443", 443, true},     // exact
      {"443", 4430, false},   // no implicit prefix match
      {"443", 44, false},     // no implicit suffix match
      {"8*", 80, true},       // prefix glob
      {"8*", 8080, true},     // longer
      {"8*", 8443, true},     // longer still
      {"8*", 8, true},        // '*' may match nothing
      {"8*", 180, false},     // must start with 8
      {"*", 1, true},         // anything
      {"*", 65535, true},     // anything
      {"*3", 443, true},      // suffix glob
      {"*3", 434, false},     // must end with 3
      {"4*3", 43, true},      // inner glob, empty
      {"4*3", 4003, true},    // inner glob, two digits
      {"4*3", 4430, false},   // wrong ending
      {"*4*", 8443, true},    // contains a 4
      {"*4*", 8080, false},   // no 4
      {"1*1", 11, true},      // backtracking, shortest
      {"1*1", 10101, true},   // backtracking
      {"1*1", 10110, false},  // backtracking, no match
  };
  for (const auto& c : cases) {
    EXPECT_EQ(port_glob_matches(c.glob, c.port), c.match) << c.glob << " " << c.port;
  }
}

TEST(GrammarTest, ErrorFields) {
  auto err = std::get<RuleError>(parse_http_rule("foo*.com:443"));
  EXPECT_EQ(err.list, "allow-http");
  EXPECT_EQ(err.entry, "foo*.com:443");
  EXPECT_EQ(err.what, kStar);
  EXPECT_EQ(err.message(),
            "allow-http entry \"foo*.com:443\": '*' must be a whole label at the start "
            "(\"*.example.com\")");
}

}  // namespace
}  // namespace vibepit::policy
