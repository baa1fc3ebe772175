// Query parsing and the server's own replies: one row per malformed shape, with the reason
// in a comment, then good queries and builder round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "dns_builder.hpp"
#include "vibepit/dns/wire.hpp"

namespace vibepit::dns {
namespace {

using test::Bytes;
using test::Msg;
using test::QuerySpec;

constexpr std::uint16_t A = qtype::A;

// A header with one question for www.example.com, then whatever the row adds.
Msg query_head(std::uint16_t an = 0, std::uint16_t ns = 0, std::uint16_t ar = 0) {
  Msg m;
  m.header(0x4242, kFlagRD, 1, an, ns, ar).question("www.example.com", A);
  return m;
}

// `b` without its last `n` bytes. (erase, not resize: GCC 12 with ASan warns that
// size() - n might wrap.)
Bytes cut(Bytes b, std::size_t n) {
  n = std::min(n, b.size());
  b.erase(b.end() - static_cast<std::ptrdiff_t>(n), b.end());
  return b;
}

struct BadCase {
  const char* what;
  Bytes pkt;
  WireError want;
};

TEST(ParseQuery, RejectsMalformed) {
  const std::string l63(63, 'a');
  const std::string l64(64, 'a');
  const Bytes good = test::make_query({});
  const Bytes with_opt = test::make_query({.edns = true});
  const BadCase cases[] = {
      {"empty", {}, WireError::short_header},
      {"11 octets", Bytes(good.begin(), good.begin() + 11), WireError::short_header},
      {"QR set", Msg().header(1, kFlagQR, 1, 0, 0, 0).question("a", A).b, WireError::is_response},
      {"opcode 2 (STATUS)", Msg().header(1, 2 << 11, 1, 0, 0, 0).question("a", A).b,
       WireError::bad_opcode},
      {"QDCOUNT 0", Msg().header(1, 0, 0, 0, 0, 0).b, WireError::bad_qdcount},
      {"QDCOUNT 2", Msg().header(1, 0, 2, 0, 0, 0).question("a", A).question("b", A).b,
       WireError::bad_qdcount},
      {"ends inside a label", Msg().header(1, 0, 1, 0, 0, 0).u8(3).raw("ww").b,
       WireError::truncated},
      {"ends before the root", Msg().header(1, 0, 1, 0, 0, 0).label("www").b, WireError::truncated},
      {"ends inside qtype/qclass", cut(good, 3), WireError::truncated},
      {"ends inside the OPT", cut(with_opt, 2), WireError::truncated},
      {"ARCOUNT 1, no record", query_head(0, 0, 1).b, WireError::truncated},
      {"label of 64 (0b01 type)", Msg().header(1, 0, 1, 0, 0, 0).label(l64).u8(0).u32(0x10001).b,
       WireError::bad_label},
      {"label type 0b10", Msg().header(1, 0, 1, 0, 0, 0).u8(0x80).u8(0).u32(0x10001).b,
       WireError::bad_label},
      {"name of 256 octets",
       Msg()
           .header(1, 0, 1, 0, 0, 0)
           .label(l63)
           .label(l63)
           .label(l63)
           .label(l63)
           .u8(0)
           .u32(0x10001)
           .b,
       WireError::name_too_long},
      {"pointer in the question",
       Msg().header(1, 0, 1, 0, 0, 0).label("www").ptr(12).u32(0x10001).b,
       WireError::pointer_range},
      {"record owner points at itself", query_head(0, 0, 1).ptr(33).rr_tail(250, 0, {}).b,
       WireError::pointer_loop},
      {"record owner: label, then a pointer back to the label (loop)",
       query_head(0, 0, 1).label("x").ptr(33).rr_tail(250, 0, {}).b, WireError::pointer_loop},
      {"forward pointer", query_head(0, 0, 1).ptr(40).rr_tail(250, 0, {}).b,
       WireError::pointer_loop},
      {"pointer past the end", query_head(0, 0, 1).ptr(0x3fff).rr_tail(250, 0, {}).b,
       WireError::pointer_range},
      {"pointer into the header", query_head(0, 0, 1).ptr(4).rr_tail(250, 0, {}).b,
       WireError::pointer_range},
      {"two OPTs", query_head(0, 0, 2).opt(1232).opt(1232).b, WireError::bad_opt},
      {"OPT owned by a non-root name", query_head(0, 0, 1).name("x").rr_tail(qtype::OPT, 0, {}).b,
       WireError::bad_opt},
      {"OPT owned by a pointer", query_head(0, 0, 1).ptr(12).rr_tail(qtype::OPT, 0, {}).b,
       WireError::bad_opt},
      {"OPT option longer than the rdata",
       query_head(0, 0, 1).opt(1232, 0, Bytes{0, 10, 0, 4, 1, 2}).b, WireError::bad_opt},
      {"ANCOUNT 1 in a query", query_head(1, 0, 0).rr("a", A, 1, Bytes{1, 2, 3, 4}).b,
       WireError::trailing_bytes},
      {"NSCOUNT 1 in a query", query_head(0, 1, 0).rr("a", A, 1, Bytes{1, 2, 3, 4}).b,
       WireError::trailing_bytes},
      {"a byte after the question", Msg{good}.u8(0).b, WireError::trailing_bytes},
      {"a byte after the OPT", Msg{with_opt}.u8(0).b, WireError::trailing_bytes},
  };
  for (const BadCase& c : cases) {
    Query q;
    EXPECT_EQ(parse_query(c.pkt, q), c.want)
        << c.what << ": got " << to_string(parse_query(c.pkt, q));
  }
}

TEST(ParseQuery, HeaderKeptOnError) {
  // The server needs the ID and flags for a FORMERR / NOTIMP reply.
  Query q;
  const Bytes pkt = Msg().header(0xbeef, (2 << 11) | kFlagRD, 1, 0, 0, 0).b;
  EXPECT_EQ(parse_query(pkt, q), WireError::bad_opcode);
  EXPECT_EQ(q.id, 0xbeef);
  EXPECT_EQ(q.opcode(), 2);
  EXPECT_TRUE(q.rd());
  EXPECT_EQ(q.question_end, q.question_begin);

  // After the question parsed, an error still leaves its bounds for the reply to echo.
  const Bytes extra = query_head(1, 0, 0).rr("a", A, 1, Bytes{1, 2, 3, 4}).b;
  EXPECT_EQ(parse_query(extra, q), WireError::trailing_bytes);
  EXPECT_EQ(q.qname.view(), "www.example.com");
  EXPECT_EQ(q.question_end, kHeaderSize + 17 + 4);
}

struct NameCase {
  const char* what;
  Bytes name;  // the wire name
  std::string_view text;
  bool plain;
  int labels;
};

TEST(ParseQuery, NamesAsText) {
  const std::string l63(63, 'b');
  const NameCase cases[] = {
      {"mixed case is lower-cased", Msg().name("WwW.ExAmPlE.CoM").b, "www.example.com", true, 3},
      {"root", Msg().u8(0).b, ".", true, 0},
      {"hyphen, underscore, star and digits stay", Msg().name("_dmarc.a-1.*.x9").b,
       "_dmarc.a-1.*.x9", true, 4},
      {"a dot inside a label", Msg().label("a.b").name("com").b, "a\\.b.com", false, 2},
      {"a backslash", Msg().label("a\\b").u8(0).b, "a\\092b", false, 1},
      {"odd octets", Msg().label(std::string_view("\x00 \xff", 3)).u8(0).b, "\\000\\032\\255",
       false, 1},
      {"upper-case non-ASCII is left alone", Msg().label("\xc3\x89").u8(0).b, "\\195\\137", false,
       1},
      {"longest name: 255 octets",
       Msg().label(l63).label(l63).label(l63).label(std::string(61, 'b')).u8(0).b,
       std::string_view(), true, 4},
  };
  for (const NameCase& c : cases) {
    const Bytes pkt = Msg().header(7, 0, 1, 0, 0, 0).raw(c.name).u16(A).u16(kClassIN).b;
    Query q;
    ASSERT_EQ(parse_query(pkt, q), WireError::none) << c.what;
    if (!c.text.empty()) {
      EXPECT_EQ(q.qname.view(), c.text) << c.what;
    }
    EXPECT_EQ(q.qname.plain, c.plain) << c.what;
    EXPECT_EQ(q.qname.labels, c.labels) << c.what;
    EXPECT_EQ(q.question_end, pkt.size()) << c.what;
  }
}

TEST(ParseQuery, Edns) {
  Query q;
  const Bytes plain = test::make_query({});
  ASSERT_EQ(parse_query(plain, q), WireError::none);
  EXPECT_FALSE(q.edns);
  EXPECT_EQ(q.udp_payload, 0);
  EXPECT_EQ(udp_reply_limit(q, 4096), 512u);

  // Payload 4096, version 1, DO, an ECS-like option: all understood, the option skipped.
  const Bytes pkt =
      test::Msg{test::make_query({})}.set16(10, 1).opt(4096, 0x00018000, Bytes{0, 8, 0, 2, 0, 1}).b;
  ASSERT_EQ(parse_query(pkt, q), WireError::none);
  EXPECT_TRUE(q.edns);
  EXPECT_EQ(q.udp_payload, 4096);
  EXPECT_EQ(q.edns_version, 1);
  EXPECT_TRUE(q.do_bit);
  EXPECT_EQ(udp_reply_limit(q, 1232), 1232u);  // clamped to the server's maximum
  q.udp_payload = 100;
  EXPECT_EQ(udp_reply_limit(q, 1232), 512u);  // never below 512

  // A TSIG-like record after the OPT is framed and ignored.
  const Bytes tsig = Msg{test::make_query({.edns = true})}
                         .set16(10, 2)
                         .name("key.example")
                         .rr_tail(250, 0, Bytes{1, 2, 3}, 255)
                         .b;
  ASSERT_EQ(parse_query(tsig, q), WireError::none);
  EXPECT_TRUE(q.edns);
  EXPECT_FALSE(q.do_bit);
}

// Replies are checked by parsing them back as responses to the client's query.
TEST(Builders, ErrorReplies) {
  const Bytes pkt = test::make_query({.name = "WWW.example.com",
                                      .id = 0x7777,
                                      .flags = kFlagRD | kFlagCD,
                                      .edns = true,
                                      .do_bit = true});
  Query q;
  ASSERT_EQ(parse_query(pkt, q), WireError::none);
  Bytes out(512);
  const std::size_t n = build_error(pkt, q, Rcode::refused, 1232, out);
  ASSERT_GT(n, 0u);
  const std::span<const std::uint8_t> reply(out.data(), n);
  EXPECT_EQ(test::get16(reply, 0), 0x7777);
  EXPECT_EQ(test::get16(reply, 2), kFlagQR | kFlagRD | kFlagRA | 5);  // CD not copied
  EXPECT_EQ(test::get16(reply, 10), 1);
  // The question is the client's own bytes, case included.
  EXPECT_TRUE(std::equal(pkt.begin() + 12, pkt.begin() + q.question_end, reply.begin() + 12));
  ResponseInfo info;
  ASSERT_EQ(parse_response(reply, q, info), WireError::none);
  EXPECT_EQ(info.rcode, Rcode::refused);
  EXPECT_EQ(info.opt_len, 11u);
  EXPECT_EQ(test::get16(reply, info.opt_offset + 3), 1232);     // our payload
  EXPECT_EQ(test::get32(reply, info.opt_offset + 5), 0x8000u);  // DO copied, version 0
  EXPECT_TRUE(info.addrs.empty());

  // Without EDNS, no OPT. Too small a buffer gives 0.
  const Bytes plain = test::make_query({.flags = 0});
  ASSERT_EQ(parse_query(plain, q), WireError::none);
  const std::size_t m = build_error(plain, q, Rcode::nxdomain, 1232, out);
  ASSERT_EQ(m, plain.size());
  EXPECT_EQ(test::get16(out, 2), kFlagQR | kFlagRA | 3);
  EXPECT_EQ(test::get16(out, 10), 0);
  EXPECT_EQ(build_error(plain, q, Rcode::nxdomain, 1232, std::span(out).first(m - 1)), 0u);

  // No question parsed: QDCOUNT 0, the opcode echoed with NOTIMP.
  const Bytes status = Msg().header(9, (2 << 11) | kFlagRD, 1, 0, 0, 0).question("a", A).b;
  EXPECT_EQ(parse_query(status, q), WireError::bad_opcode);
  ASSERT_EQ(build_error(status, q, Rcode::notimp, 1232, out), kHeaderSize);
  EXPECT_EQ(test::get16(out, 2), kFlagQR | (2 << 11) | kFlagRD | kFlagRA | 4);
  EXPECT_EQ(test::get16(out, 4), 0);
}

TEST(Builders, AnyHinfo) {
  const Bytes pkt = test::make_query({.type = qtype::ANY, .edns = true});
  Query q;
  ASSERT_EQ(parse_query(pkt, q), WireError::none);
  Bytes out(512);
  const std::size_t n = build_any_hinfo(pkt, q, 3600, 1232, out);
  ASSERT_GT(n, 0u);
  const std::span<const std::uint8_t> reply(out.data(), n);
  ResponseInfo info;
  ASSERT_EQ(parse_response(reply, q, info), WireError::none);
  EXPECT_EQ(test::get16(reply, 6), 1);  // one answer
  ASSERT_EQ(info.ttl_offsets.size(), 1u);
  const std::size_t rr = q.question_end;
  EXPECT_EQ(test::get16(reply, rr), 0xc00c);  // owner: the question name
  EXPECT_EQ(test::get16(reply, rr + 2), qtype::HINFO);
  EXPECT_EQ(test::get32(reply, rr + 6), 3600u);
  const Bytes rdata(reply.begin() + rr + 12, reply.begin() + rr + 12 + 9);
  EXPECT_EQ(rdata, (Bytes{7, 'R', 'F', 'C', '8', '4', '8', '2', 0}));
  EXPECT_EQ(info.opt_len, 11u);
}

TEST(Builders, UpstreamQuery) {
  // AD, CD and RD from the client; a cookie option in its OPT.
  const Bytes pkt = Msg()
                        .header(0x5555, kFlagRD | kFlagCD | kFlagAD, 1, 0, 0, 1)
                        .question("Api.Example.com", qtype::HTTPS)
                        .opt(4096, 0x8000, Bytes{0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8})
                        .b;
  Query client;
  ASSERT_EQ(parse_query(pkt, client), WireError::none);
  Bytes out(512);
  const std::size_t n = build_upstream_query(pkt, client, 1400, out);
  ASSERT_GT(n, 0u);
  Query up;
  ASSERT_EQ(parse_query(std::span(out).first(n), up), WireError::none);
  EXPECT_EQ(up.id, 0);
  EXPECT_EQ(up.flags, kFlagRD | kFlagCD);  // nothing else
  EXPECT_EQ(up.qname.view(), "api.example.com");
  EXPECT_EQ(up.qtype, qtype::HTTPS);
  EXPECT_TRUE(up.edns);
  EXPECT_EQ(up.udp_payload, 1400);
  EXPECT_TRUE(up.do_bit);
  EXPECT_EQ(n, client.question_end + 11);  // the client's option did not travel
  EXPECT_TRUE(std::equal(pkt.begin() + 12, pkt.begin() + client.question_end, out.begin() + 12));

  // A client without EDNS still gets an OPT upstream, with DO clear; RD clear stays clear.
  const Bytes plain = test::make_query({.flags = 0});
  ASSERT_EQ(parse_query(plain, client), WireError::none);
  const std::size_t m = build_upstream_query(plain, client, 1232, out);
  ASSERT_EQ(parse_query(std::span(out).first(m), up), WireError::none);
  EXPECT_EQ(up.flags, 0);
  EXPECT_TRUE(up.edns);
  EXPECT_FALSE(up.do_bit);
  EXPECT_EQ(build_upstream_query(plain, client, 1232, std::span(out).first(m - 1)), 0u);
}

TEST(Names, ErrorPhrases) {
  EXPECT_EQ(to_string(Rcode::refused), "REFUSED");
  EXPECT_EQ(to_string(WireError::pointer_loop), "compression pointer loop");
}

}  // namespace
}  // namespace vibepit::dns
