#include "vibepit/tls/client_hello.hpp"

#include <gtest/gtest.h>

#include "hello_builder.hpp"

#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace vibepit::tls {
namespace {

using namespace hello_builder;  // NOLINT: the builders of test ClientHellos

std::string load(const std::string& name) {
  std::ifstream in(std::string(VIBEPIT_CLIENT_HELLOS) + "/" + name + ".bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(bytes.empty()) << name;
  return bytes;
}

// The handshake bytes of recorded records, to frame them anew.
std::string message_of(const std::string& records) {
  std::string out;
  for (std::size_t at = 0; at + 5 <= records.size();) {
    const std::size_t n = (static_cast<unsigned char>(records[at + 3]) << 8) |
                          static_cast<unsigned char>(records[at + 4]);
    out += records.substr(at + 5, n);
    at += 5 + n;
  }
  return out;
}

HelloReader feed_in_pieces(const std::string& bytes, std::size_t piece) {
  HelloReader r;
  for (std::size_t at = 0; at < bytes.size() && r.status() == HelloStatus::need_more; at += piece) {
    r.feed(std::string_view(bytes).substr(at, piece));
  }
  return r;
}

struct Recorded {
  const char* file;
  const char* server_name;  // nullptr: none sent
  std::uint16_t version;
};

// Recorded on Debian 12 by client_hellos/record.py: curl 7.88.1 and openssl s_client 3.0
// (OpenSSL 3.0), Go 1.19, Node.js 20, Python 3.11 (OpenSSL 3.0).
const Recorded kRecorded[] = {
    {"curl", "curl.sni.test", 0x0303},
    {"openssl", "openssl.sni.test", 0x0303},
    {"openssl-tls12", "tls12.sni.test", 0x0303},
    {"openssl-no-sni", nullptr, 0x0303},
    {"go", "go.sni.test", 0x0303},
    {"node", "node.sni.test", 0x0303},
    {"python", "python.sni.test", 0x0303},
    {"python-no-sni", nullptr, 0x0303},
};

class RecordedHello : public testing::TestWithParam<Recorded> {};

void expect_recorded(const HelloReader& r, const Recorded& want, const std::string& how) {
  ASSERT_EQ(r.status(), HelloStatus::complete) << how << ": " << r.error();
  EXPECT_EQ(r.has_server_name(), want.server_name != nullptr) << how;
  if (want.server_name != nullptr) {
    EXPECT_EQ(r.server_name(), want.server_name) << how;
  }
  EXPECT_EQ(r.legacy_version(), want.version) << how;
  EXPECT_FALSE(r.has_ech()) << how;
}

TEST_P(RecordedHello, ReadWhole) {
  const auto bytes = load(GetParam().file);
  expect_recorded(read_client_hello(bytes), GetParam(), "whole");
}

TEST_P(RecordedHello, ReadOneByteAtATime) {
  const auto bytes = load(GetParam().file);
  expect_recorded(feed_in_pieces(bytes, 1), GetParam(), "one byte per feed");
}

TEST_P(RecordedHello, EveryPrefixNeedsMore) {
  const auto bytes = load(GetParam().file);
  for (std::size_t n = 1; n < bytes.size(); ++n) {
    auto r = read_client_hello(std::string_view(bytes).substr(0, n));
    ASSERT_EQ(r.status(), HelloStatus::need_more) << n << " of " << bytes.size();
  }
}

TEST_P(RecordedHello, ReframedInSmallRecordsAndRandomSplits) {
  const auto message = message_of(load(GetParam().file));
  std::mt19937 rng(7);
  for (std::size_t per_record : {1, 2, 3, 4, 5, 17, 100, 511}) {
    const auto bytes = in_records(message, per_record);
    if (bytes.size() > kMaxHelloBytes) {
      EXPECT_EQ(read_client_hello(bytes).status(), HelloStatus::too_large) << per_record;
      continue;
    }
    expect_recorded(read_client_hello(bytes), GetParam(),
                    "records of " + std::to_string(per_record));
    HelloReader r;
    for (std::size_t at = 0; at < bytes.size() && r.status() == HelloStatus::need_more;) {
      const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 40)(rng);
      r.feed(std::string_view(bytes).substr(at, n));
      at += n;
    }
    expect_recorded(r, GetParam(), "random splits, records of " + std::to_string(per_record));
  }
}

TEST_P(RecordedHello, BytesAfterTheHelloAreNotLookedAt) {
  auto bytes = load(GetParam().file) + std::string("\x17\x03\x03\x00\x05hello", 10);
  expect_recorded(read_client_hello(bytes), GetParam(), "with bytes after it");
}

INSTANTIATE_TEST_SUITE_P(Clients, RecordedHello, testing::ValuesIn(kRecorded), [](const auto& p) {
  std::string n = p.param.file;
  for (auto& c : n) c = c == '-' ? '_' : c;
  return n;
});

TEST(ClientHello, BuiltHelloWithServerName) {
  auto r = read_client_hello(hello(sni_extension("Api.Example.com.") + extension(16, "xx")));
  ASSERT_EQ(r.status(), HelloStatus::complete) << r.error();
  EXPECT_EQ(r.server_name(), "Api.Example.com.");
}

TEST(ClientHello, WithoutExtensionsHasNoServerName) {
  auto r = read_client_hello(in_records(hello_message(std::nullopt)));
  ASSERT_EQ(r.status(), HelloStatus::complete) << r.error();
  EXPECT_FALSE(r.has_server_name());
  r = read_client_hello(hello(extension(10, "\x00\x02\x00\x1d")));
  ASSERT_EQ(r.status(), HelloStatus::complete) << r.error();
  EXPECT_FALSE(r.has_server_name());
}

TEST(ClientHello, EncryptedClientHelloReadsTheOuterName) {
  auto r = read_client_hello(
      hello(sni_extension("public.example") + extension(0xfe0d, std::string(200, '\x5a'))));
  ASSERT_EQ(r.status(), HelloStatus::complete) << r.error();
  EXPECT_TRUE(r.has_ech());
  EXPECT_EQ(r.server_name(), "public.example");
}

TEST(ClientHello, ABigHelloOverSeveralRecords) {
  // A post-quantum key share and padding make real ClientHellos of 1.5 to 2 KiB.
  const auto ext = sni_extension("big.example") + extension(21, std::string(9000, '\0'));
  auto r = read_client_hello(in_records(hello_message(ext), 4096));
  ASSERT_EQ(r.status(), HelloStatus::complete) << r.error();
  EXPECT_EQ(r.server_name(), "big.example");
}

TEST(ClientHello, NotTls) {
  const std::vector<std::string> firsts = {
      "GET / HTTP/1.1\r\n",       "SSH-2.0-OpenSSH_9.2\r\n",
      "\x80\x2e\x01\x03",         std::string("\x15\x03\x03\x00\x02\x02\x28", 7),
      std::string("\x16\x02", 2), std::string("\x16\x00", 2)};
  for (const auto& first : firsts) {
    EXPECT_EQ(read_client_hello(first).status(), HelloStatus::not_tls) << first;
  }
  // One byte that could begin TLS is not enough to say.
  EXPECT_EQ(read_client_hello("\x16").status(), HelloStatus::need_more);
}

struct Bad {
  const char* what;
  std::string bytes;
  HelloStatus want;
};

TEST(ClientHello, MalformedAndOversized) {
  const std::string sni = sni_extension("a.example");
  const std::string message = hello_message(sni);
  std::string many;
  for (int i = 0; i < 129; ++i) many += extension(static_cast<std::uint16_t>(0x1000 + i), "");
  std::string wrong_type = message;
  wrong_type[0] = '\x02';
  std::string long_session = message;
  long_session[4 + 2 + 32] = '\x21';
  const std::vector<Bad> cases = {
      {"two server_name extensions", hello(sni + sni_extension("b.example")),
       HelloStatus::malformed},
      {"two names in one list", hello(sni_extension({{0, "a.example"}, {0, "b.example"}})),
       HelloStatus::malformed},
      {"a name of another type", hello(sni_extension({{1, "a.example"}})), HelloStatus::malformed},
      {"an empty name", hello(sni_extension("")), HelloStatus::malformed},
      {"an empty server_name extension", hello(extension(0, "")), HelloStatus::malformed},
      {"a list shorter than its extension", hello(extension(0, u16(3) + '\0' + u16(1) + "ab")),
       HelloStatus::malformed},
      {"any repeated extension", hello(sni + extension(43, "\x02\x03\x04") + extension(43, "")),
       HelloStatus::malformed},
      {"more than 128 extensions", hello(sni + many), HelloStatus::malformed},
      {"an extension past the end", hello(sni + u16(16) + u16(50) + "h2"), HelloStatus::malformed},
      {"not a ClientHello", in_records(wrong_type), HelloStatus::malformed},
      {"a session id over 32 bytes", in_records(long_session), HelloStatus::malformed},
      {"an empty record", std::string("\x16\x03\x01\x00\x00", 5) + hello(sni),
       HelloStatus::malformed},
      {"a record over 2^14", std::string("\x16\x03\x01\x40\x01", 5) + std::string(16385, '\x01'),
       HelloStatus::malformed},
      {"an alert between the records",
       in_records(message.substr(0, 10)) + std::string("\x15\x03\x03\x00\x02\x02\x28", 7),
       HelloStatus::malformed},
      {"a second record of version 2.x",
       in_records(message.substr(0, 10)) + std::string("\x16\x02\x00\x00\x01\x01", 6),
       HelloStatus::malformed},
      {"a message over 16 KiB",
       in_records(hello_message(sni + extension(21, std::string(16400, 0)))),
       HelloStatus::too_large},
      {"records of one byte",
       in_records(hello_message(sni + extension(21, std::string(4000, 0))), 1),
       HelloStatus::too_large},
  };
  for (const auto& c : cases) {
    auto r = read_client_hello(c.bytes);
    EXPECT_EQ(r.status(), c.want) << c.what << ": " << r.error();
    EXPECT_FALSE(r.has_server_name()) << c.what;
    EXPECT_FALSE(r.error().empty()) << c.what;
    // The same, one byte at a time: the verdict does not depend on the split.
    EXPECT_EQ(feed_in_pieces(c.bytes, 1).status(), c.want) << c.what << ", byte by byte";
  }
}

TEST(ClientHello, TheVerdictStays) {
  HelloReader r;
  EXPECT_EQ(r.feed("GET"), HelloStatus::not_tls);
  EXPECT_EQ(r.feed(hello(sni_extension("a.example"))), HelloStatus::not_tls);
  HelloReader done = read_client_hello(hello(sni_extension("a.example")));
  EXPECT_EQ(done.feed("more"), HelloStatus::complete);
  EXPECT_EQ(done.server_name(), "a.example");
}

TEST(ClientHello, SameName) {
  EXPECT_TRUE(same_name("api.example.com", "api.example.com"));
  EXPECT_TRUE(same_name("API.Example.COM", "api.example.com"));
  EXPECT_TRUE(same_name("api.example.com.", "api.example.com"));
  EXPECT_TRUE(same_name("api.example.com", "api.example.com."));
  EXPECT_TRUE(same_name("203.0.113.7", "203.0.113.7"));
  EXPECT_FALSE(same_name("evil.example.com", "api.example.com"));
  EXPECT_FALSE(same_name("api.example.com..", "api.example.com"));
  EXPECT_FALSE(same_name("xapi.example.com", "api.example.com"));
  EXPECT_FALSE(same_name("api.example.co", "api.example.com"));
  EXPECT_FALSE(same_name(std::string("api.example.com\0", 16), "api.example.com"));
  EXPECT_FALSE(same_name("", ""));
  EXPECT_FALSE(same_name(".", ""));
  // Only ASCII letters fold: 0xC1 is not 0xE1.
  EXPECT_FALSE(same_name("\xc1.example", "\xe1.example"));
}

TEST(ClientHello, QuotedName) {
  EXPECT_EQ(quoted_name("a.example"), "\"a.example\"");
  EXPECT_EQ(quoted_name(std::string("a\x1b[2J\"\\\0\xff", 9)), "\"a\\x1b[2J\\x22\\x5c\\x00\\xff\"");
}

}  // namespace
}  // namespace vibepit::tls
