// Upstream responses: what parse_response() collects and rejects, and the client's copy that
// build_reply_from_upstream() makes of them.
#include <gtest/gtest.h>

#include <string>

#include "dns_builder.hpp"
#include "vibepit/dns/wire.hpp"

namespace vibepit::dns {
namespace {

using test::addr_rdata;
using test::Bytes;
using test::ip;
using test::Msg;
using test::QuerySpec;

constexpr std::uint16_t A = qtype::A, AAAA = qtype::AAAA, CNAME = qtype::CNAME;
constexpr std::uint16_t kQname = 12;  // where the question name starts

Query parsed(const Bytes& pkt) {
  Query q;
  EXPECT_EQ(parse_query(pkt, q), WireError::none);
  return q;
}

TEST(ParseResponse, CnameChainWithCompression) {
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  Msg m = test::response_to(spec, 4, 0, 0);
  // www.example.com CNAME edge.example.com (the suffix compressed to the question's),
  // edge.example.com CNAME b.cdn.test, b.cdn.test A and AAAA.
  m.rr_at(kQname, CNAME, 300, Msg().labels("edge").ptr(kQname + 4).b);
  const std::uint16_t edge = static_cast<std::uint16_t>(m.here() - 2 - 5);
  m.rr_at(edge, CNAME, 120, test::name_rdata("b.cdn.test"));
  const std::uint16_t cdn = static_cast<std::uint16_t>(m.here() - 12);
  m.rr_at(cdn, A, 60, addr_rdata("203.0.113.7"));
  m.rr_at(cdn, AAAA, 0x80000000u, addr_rdata("2001:db8::7"));  // top bit: read as 0

  ResponseInfo info;
  ASSERT_EQ(parse_response(m.b, q, info), WireError::none);
  EXPECT_EQ(info.rcode, Rcode::noerror);
  EXPECT_FALSE(info.negative);
  EXPECT_FALSE(info.tc);
  ASSERT_EQ(info.addrs.size(), 2u);
  EXPECT_EQ(info.addrs[0], ip("203.0.113.7"));
  EXPECT_EQ(info.addrs[1], ip("2001:db8::7"));
  EXPECT_EQ(info.ttl, 0u);
  ASSERT_EQ(info.ttl_offsets.size(), 4u);
  EXPECT_EQ(test::get32(m.b, info.ttl_offsets[0]), 300u);
  EXPECT_EQ(test::get32(m.b, info.ttl_offsets[2]), 60u);
  EXPECT_EQ(info.opt_len, 0u);
  EXPECT_EQ(info.question_end, q.question_end);
}

TEST(ParseResponse, HttpsHintsAfterAddresses) {
  const QuerySpec spec{.type = qtype::HTTPS};
  const Query q = parsed(test::make_query(spec));
  const Bytes v4 = test::concat({addr_rdata("203.0.113.1"), addr_rdata("10.0.0.1")});
  Msg m = test::response_to(spec, 1, 0, 2);
  m.rr_at(kQname, qtype::HTTPS, 300,
          test::svc_rdata(1, ".", {{1, Bytes{2, 'h', '2'}}, {4, v4}, {6, addr_rdata("::1")}}));
  m.rr("svc.example.net", qtype::SVCB, 300, test::svc_rdata(2, ".", {{4, addr_rdata("1.2.3.4")}}));
  m.rr("www.example.com", A, 300, addr_rdata("198.51.100.9"));
  ResponseInfo info;
  ASSERT_EQ(parse_response(m.b, q, info), WireError::none);
  EXPECT_FALSE(info.negative);
  const std::vector<policy::IpAddr> want = {ip("198.51.100.9"), ip("203.0.113.1"), ip("10.0.0.1"),
                                            ip("::1"), ip("1.2.3.4")};
  EXPECT_EQ(info.addrs, want);
  EXPECT_EQ(info.ttl, 300u);
}

// The rebinding defence classifies every A and AAAA record whatever its owner and section:
// an address in the authority section reaches the client as surely as one in the answer.
TEST(ParseResponse, AddressesInEverySectionAreCollected) {
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  Msg m = test::response_to(spec, 1, 3, 1);
  m.rr_at(kQname, A, 300, addr_rdata("203.0.113.7"));
  m.rr("example.com", qtype::NS, 300, test::name_rdata("ns.example.com"));
  m.rr("ns.example.com", A, 300, addr_rdata("10.0.0.1"));
  m.rr("svc.example.com", qtype::HTTPS, 300, test::svc_rdata(1, ".", {{6, addr_rdata("fd00::1")}}));
  m.rr("ns.example.com", AAAA, 300, addr_rdata("::1"));
  ResponseInfo info;
  ASSERT_EQ(parse_response(m.b, q, info), WireError::none);
  const std::vector<policy::IpAddr> want = {ip("203.0.113.7"), ip("10.0.0.1"), ip("::1"),
                                            ip("fd00::1")};
  EXPECT_EQ(info.addrs, want);
}

struct BadRdata {
  const char* what;
  std::uint16_t type;
  Bytes rdata;
};

TEST(ParseResponse, RejectsBadRdata) {
  const BadRdata cases[] = {
      {"A of 5 octets", A, Bytes{1, 2, 3, 4, 5}},
      {"A of 3 octets", A, Bytes{1, 2, 3}},
      {"AAAA of 4 octets", AAAA, Bytes{1, 2, 3, 4}},
      {"SvcParams out of order", qtype::HTTPS,
       test::svc_rdata(1, ".", {{4, addr_rdata("1.2.3.4")}, {1, Bytes{2, 'h', '2'}}})},
      {"repeated key", qtype::HTTPS,
       test::svc_rdata(1, ".", {{4, addr_rdata("1.2.3.4")}, {4, addr_rdata("1.2.3.5")}})},
      {"ipv4hint of 5 octets", qtype::HTTPS, test::svc_rdata(1, ".", {{4, Bytes{1, 2, 3, 4, 5}}})},
      {"ipv6hint of 4 octets", qtype::SVCB, test::svc_rdata(1, ".", {{6, addr_rdata("1.2.3.4")}})},
      {"param length past the rdata", qtype::HTTPS,
       test::concat({test::svc_rdata(1, ".", {}), Bytes{0, 4, 0, 8, 1, 2, 3, 4}})},
      {"half a param header", qtype::HTTPS, test::concat({test::svc_rdata(1, ".", {}), Bytes{0}})},
      {"target name compressed", qtype::HTTPS, Bytes{0, 1, 0xc0, 12}},
      {"no priority", qtype::HTTPS, Bytes{0}},
      {"CNAME with a byte after its name", CNAME, test::concat({test::name_rdata("a"), Bytes{0}})},
      {"CNAME name running past the rdata", CNAME, Bytes{3, 'a', 'b'}},
      {"SOA without its numbers", qtype::SOA, test::name_rdata("a")},
  };
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  for (const BadRdata& c : cases) {
    Msg m = test::response_to(spec, 1, 0, 0);
    m.rr_at(kQname, c.type, 60, c.rdata);
    ResponseInfo info;
    EXPECT_EQ(parse_response(m.b, q, info), WireError::bad_rdata) << c.what;
  }
}

struct NegCase {
  const char* what;
  std::uint16_t rcode;
  bool soa;
  std::uint32_t soa_ttl, minimum;
  bool negative;
  std::uint32_t ttl;
};

TEST(ParseResponse, NegativeTtlFromSoa) {
  const NegCase cases[] = {
      {"NXDOMAIN, MINIMUM smaller", 3, true, 300, 60, true, 60},
      {"NXDOMAIN, SOA TTL smaller", 3, true, 30, 600, true, 30},
      {"NODATA (NOERROR, no answer)", 0, true, 900, 120, true, 120},
      {"NXDOMAIN without SOA", 3, false, 0, 0, true, 0},
      {"SOA MINIMUM with the top bit", 3, true, 300, 0x80000010u, true, 0},
      {"SERVFAIL is not negative", 2, false, 0, 0, false, 0},
  };
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  for (const NegCase& c : cases) {
    Msg m = test::response_to(spec, 0, c.soa ? 1 : 0, 0, c.rcode);
    if (c.soa) m.rr("example.com", qtype::SOA, c.soa_ttl, test::soa_rdata(c.minimum));
    ResponseInfo info;
    ASSERT_EQ(parse_response(m.b, q, info), WireError::none) << c.what;
    EXPECT_EQ(info.negative, c.negative) << c.what;
    EXPECT_EQ(info.ttl, c.ttl) << c.what;
  }

  // A CNAME for the name makes a NOERROR answer without the type positive; the minimum TTL
  // covers the authority section too.
  Msg m = test::response_to(spec, 1, 1, 0);
  m.rr("WWW.Example.COM", CNAME, 500, test::name_rdata("gone.example.net"));
  m.rr("example.net", qtype::SOA, 200, test::soa_rdata(10));
  ResponseInfo info;
  ASSERT_EQ(parse_response(m.b, q, info), WireError::none);
  EXPECT_FALSE(info.negative);
  EXPECT_EQ(info.ttl, 200u);
  // A CNAME for another name does not count.
  Msg other = test::response_to(spec, 1, 0, 0);
  other.rr("elsewhere.example.com", CNAME, 500, test::name_rdata("x.example.net"));
  ASSERT_EQ(parse_response(other.b, q, info), WireError::none);
  EXPECT_TRUE(info.negative);
}

TEST(ParseResponse, Rcodes) {
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  ResponseInfo info;
  ASSERT_EQ(parse_response(test::response_to(spec, 0, 0, 0, 9).b, q, info), WireError::none);
  EXPECT_EQ(info.rcode, Rcode::servfail);  // NOTAUTH folds into SERVFAIL
  // An extended rcode in the OPT (BADVERS) is SERVFAIL whatever the low bits say.
  ASSERT_EQ(parse_response(test::response_to(spec, 0, 0, 1).opt(1232, 0x01000000).b, q, info),
            WireError::none);
  EXPECT_EQ(info.rcode, Rcode::servfail);
  ASSERT_EQ(parse_response(test::response_to(spec, 0, 0, 0, 5, kFlagTC).b, q, info),
            WireError::none);
  EXPECT_EQ(info.rcode, Rcode::refused);
  EXPECT_TRUE(info.tc);
}

struct BadResponse {
  const char* what;
  Bytes pkt;
  WireError want;
};

TEST(ParseResponse, RejectsMalformed) {
  const QuerySpec spec{};
  const Query q = parsed(test::make_query(spec));
  const Bytes a = addr_rdata("203.0.113.7");
  const auto resp = [&](std::uint16_t an, std::uint16_t ns, std::uint16_t ar) {
    return test::response_to(spec, an, ns, ar);
  };
  const std::uint16_t first_rr = static_cast<std::uint16_t>(q.question_end);
  const BadResponse cases[] = {
      {"short", Bytes(5, 0), WireError::short_header},
      {"QR clear", test::Msg{test::make_query(spec)}.b, WireError::question_mismatch},
      {"other name", test::response_to({.name = "www.example.org"}, 0, 0, 0).b,
       WireError::question_mismatch},
      {"other type", test::response_to({.type = AAAA}, 0, 0, 0).b, WireError::question_mismatch},
      {"other class", Msg().header(0, kFlagQR, 1, 0, 0, 0).question("www.example.com", A, 3).b,
       WireError::question_mismatch},
      {"QDCOUNT 0", Msg().header(0, kFlagQR, 0, 0, 0, 0).b, WireError::bad_qdcount},
      {"ANCOUNT 1, nothing there", resp(1, 0, 0).b, WireError::truncated},
      {"rdata past the end", resp(1, 0, 0).rr_at(kQname, A, 1, a).set16(first_rr + 10, 5).b,
       WireError::truncated},
      {"trailing byte", resp(1, 0, 0).rr_at(kQname, A, 1, a).u8(0).b, WireError::trailing_bytes},
      {"A -> B -> A", resp(2, 0, 0).rr_at(first_rr + 16, A, 1, a).rr_at(first_rr, A, 1, a).b,
       WireError::pointer_loop},
      {"pointer past the end", resp(1, 0, 0).rr_at(0x3000, A, 1, a).b, WireError::pointer_range},
      {"OPT in the answer section", resp(1, 0, 0).opt(1232).b, WireError::bad_opt},
      {"two OPTs", resp(0, 0, 2).opt(1232).opt(1232).b, WireError::bad_opt},
      {"OPT owned by a name", resp(0, 0, 1).name("x").rr_tail(qtype::OPT, 0, {}, 1232).b,
       WireError::bad_opt},
      // A pointer to a label that runs on into the record holding the pointer.
      {"pointer leads back over itself",
       resp(2, 0, 0).rr_at(kQname, 99, 1, Bytes{5}).rr_at(first_rr + 12, A, 60, a).b,
       WireError::pointer_loop},
      // The cache rewrites TTLs: a name made of TTL octets would change under it.
      {"name points into a TTL field",
       resp(2, 0, 0).rr_at(kQname, A, 0x01610000, a).rr_at(first_rr + 6, A, 1, a).b,
       WireError::pointer_range},
      // After the OPT, a name that points into it would break once the OPT is cut out.
      {"name after the OPT points into it", resp(0, 0, 2).opt(1232).rr_at(first_rr, A, 1, a).b,
       WireError::bad_opt},
      {"name after the OPT points past it",
       resp(0, 0, 3).opt(1232).rr("x.example", A, 1, a).rr_at(first_rr + 11, A, 1, a).b,
       WireError::bad_opt},
  };
  for (const BadResponse& c : cases) {
    ResponseInfo info;
    EXPECT_EQ(parse_response(c.pkt, q, info), c.want) << c.what;
  }
}

// An upstream answer of `n` A records for www.example.com, with an OPT.
Msg upstream_a(const QuerySpec& spec, int n) {
  Msg m = test::response_to(spec, static_cast<std::uint16_t>(n), 0, 1);
  for (int i = 0; i < n; ++i) {
    m.rr_at(kQname, A, 300, Bytes{203, 0, 113, static_cast<std::uint8_t>(i)});
  }
  return m.opt(4096, 0, Bytes{0, 10, 0, 2, 7, 7});
}

TEST(ReplyFromUpstream, ClientIdCaseAndOpt) {
  const QuerySpec spec{.name = "wWw.ExAmple.cOM", .id = 0xabcd};
  const Bytes pkt = test::make_query(spec);
  const Query q = parsed(pkt);
  const Msg up = upstream_a(spec, 2);
  ResponseInfo info;
  ASSERT_EQ(parse_response(up.b, q, info), WireError::none);
  EXPECT_EQ(info.opt_len, 17u);

  Bytes out(1232);
  const std::size_t n = build_reply_from_upstream(up.b, info, pkt, q, 512, 1232, out);
  ASSERT_EQ(n, up.b.size() - 17);  // the OPT stripped for a client without EDNS
  const std::span<const std::uint8_t> reply(out.data(), n);
  EXPECT_EQ(test::get16(reply, 0), 0xabcd);
  EXPECT_EQ(test::get16(reply, 10), 0);
  EXPECT_TRUE(std::equal(pkt.begin() + 12, pkt.begin() + q.question_end, reply.begin() + 12));
  ResponseInfo again;
  ASSERT_EQ(parse_response(reply, q, again), WireError::none);
  EXPECT_EQ(again.addrs, info.addrs);
  EXPECT_EQ(again.opt_len, 0u);

  // An EDNS client gets our OPT instead of the upstream's.
  const QuerySpec espec{.name = "www.example.com", .edns = true, .payload = 4096, .do_bit = true};
  const Bytes epkt = test::make_query(espec);
  const Query eq = parsed(epkt);
  const std::size_t e = build_reply_from_upstream(up.b, info, epkt, eq, 4096, 1400, out);
  ASSERT_EQ(e, up.b.size() - 17 + 11);
  ASSERT_EQ(parse_response(std::span(out).first(e), eq, again), WireError::none);
  EXPECT_EQ(again.opt_len, 11u);
  EXPECT_EQ(test::get16(out, again.opt_offset + 3), 1400);
  EXPECT_EQ(test::get32(out, again.opt_offset + 5), 0x8000u);
  EXPECT_EQ(
      build_reply_from_upstream(up.b, info, epkt, eq, 4096, 1400, std::span(out).first(e - 1)), 0u);
}

TEST(ReplyFromUpstream, TruncatesPastTheLimit) {
  const QuerySpec spec{.edns = true};
  const Bytes pkt = test::make_query(spec);
  const Query q = parsed(pkt);
  const Msg up = upstream_a(spec, 40);  // 40 * 16 octets of records
  ResponseInfo info;
  ASSERT_EQ(parse_response(up.b, q, info), WireError::none);
  Bytes out(4096);
  const std::size_t n = build_reply_from_upstream(up.b, info, pkt, q, 512, 1232, out);
  ASSERT_EQ(n, q.question_end + 11);  // header, question, our OPT
  EXPECT_NE(test::get16(out, 2) & kFlagTC, 0);
  EXPECT_EQ(test::get16(out, 6), 0);
  EXPECT_EQ(test::get16(out, 8), 0);
  EXPECT_EQ(test::get16(out, 10), 1);
  ResponseInfo again;
  ASSERT_EQ(parse_response(std::span(out).first(n), q, again), WireError::none);
  EXPECT_TRUE(again.tc);
  // With room, all of it.
  const std::size_t full = build_reply_from_upstream(up.b, info, pkt, q, 4096, 1232, out);
  EXPECT_EQ(full, up.b.size() - 17 + 11);
  EXPECT_EQ(test::get16(out, 2) & kFlagTC, 0);
}

TEST(ReplyFromUpstream, OptInTheMiddle) {
  const QuerySpec spec{};
  const Bytes pkt = test::make_query(spec);
  const Query q = parsed(pkt);
  Msg up = test::response_to(spec, 1, 0, 2);
  up.rr_at(kQname, A, 300, addr_rdata("203.0.113.1"));
  up.opt(1232);
  up.rr_at(kQname, AAAA, 300, addr_rdata("2001:db8::1"));  // points before the OPT: fine
  ResponseInfo info;
  ASSERT_EQ(parse_response(up.b, q, info), WireError::none);
  Bytes out(512);
  const std::size_t n = build_reply_from_upstream(up.b, info, pkt, q, 512, 1232, out);
  ASSERT_EQ(n, up.b.size() - 11);
  ResponseInfo again;
  ASSERT_EQ(parse_response(std::span(out).first(n), q, again), WireError::none);
  EXPECT_EQ(again.addrs, info.addrs);
  EXPECT_EQ(again.addrs.size(), 2u);
  EXPECT_EQ(test::get16(out, 10), 1);  // the AAAA remains in the additional section
}

}  // namespace
}  // namespace vibepit::dns
