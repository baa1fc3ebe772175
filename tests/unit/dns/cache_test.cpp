// The answer cache, driven with explicit time points: hits and misses, TTL arithmetic, the
// key, eviction, what is never stored, and the client-specific parts of a hit.
#include <gtest/gtest.h>

#include <chrono>

#include "dns_builder.hpp"
#include "vibepit/dns/cache.hpp"

namespace vibepit::dns {
namespace {

using std::chrono::seconds;
using test::addr_rdata;
using test::Bytes;
using test::Msg;
using test::QuerySpec;

const Cache::clock::time_point t0{seconds(1000)};

// A client query, an upstream answer to it and the parse of that answer, kept together.
struct Exchange {
  Bytes pkt;
  Query q;
  Bytes upstream;
  ResponseInfo info;
};

Exchange exchange(const QuerySpec& spec, const Msg& upstream) {
  Exchange x{test::make_query(spec), {}, upstream.b, {}};
  EXPECT_EQ(parse_query(x.pkt, x.q), WireError::none);
  EXPECT_EQ(parse_response(x.upstream, x.q, x.info), WireError::none);
  return x;
}

// www.example.com A 203.0.113.7 with `ttl`, an NS record in authority, and an OPT.
Exchange positive(const QuerySpec& spec, std::uint32_t ttl = 300) {
  Msg m = test::response_to(spec, 1, 1, 1);
  m.rr_at(12, qtype::A, ttl, addr_rdata("203.0.113.7"));
  // Owned by the parent zone: a pointer just past the question's first label.
  const auto parent = static_cast<std::uint16_t>(12 + 1 + spec.name.find('.'));
  m.rr_at(parent, qtype::NS, ttl + 100, test::name_rdata("ns.example.com"));
  m.opt(1232, spec.do_bit ? 0x8000u : 0u);
  return exchange(spec, m);
}

Exchange nxdomain(const QuerySpec& spec, std::uint32_t minimum) {
  Msg m = test::response_to(spec, 0, 1, 0, 3);
  m.rr("example.com", qtype::SOA, 3600, test::soa_rdata(minimum));
  return exchange(spec, m);
}

// Looks `spec` up at `now` and returns the reply (empty on a miss).
Bytes lookup(Cache& c, const QuerySpec& spec, Cache::clock::time_point now, std::size_t limit = 512,
             Cache::Hit* hit_out = nullptr) {
  const Bytes pkt = test::make_query(spec);
  Query q;
  EXPECT_EQ(parse_query(pkt, q), WireError::none);
  Bytes out(4096);
  const Cache::Hit hit = c.lookup(pkt, q, now, limit, 1232, out);
  if (hit_out != nullptr) *hit_out = hit;
  out.resize(hit.size);
  return out;
}

std::uint32_t first_ttl(const Bytes& reply, const QuerySpec& spec) {
  Query q;
  EXPECT_EQ(parse_query(test::make_query(spec), q), WireError::none);
  ResponseInfo info;
  EXPECT_EQ(parse_response(reply, q, info), WireError::none);
  return test::get32(reply, info.ttl_offsets.at(0));
}

TEST(Cache, HitMissAndTtlDecrement) {
  Cache c;
  const QuerySpec spec{.id = 0x1111};
  EXPECT_TRUE(lookup(c, spec, t0).empty());
  EXPECT_EQ(c.misses(), 1u);

  const Exchange x = positive(spec, 300);
  c.insert(x.q, x.upstream, x.info, t0);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.bytes(), x.upstream.size() - 11);  // stored without the OPT

  Cache::Hit hit;
  const QuerySpec again{.id = 0x2222};
  Bytes r = lookup(c, again, t0 + std::chrono::milliseconds(10'900), 512, &hit);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(c.hits(), 1u);
  EXPECT_EQ(hit.rcode, Rcode::noerror);
  ASSERT_EQ(hit.addrs.size(), 1u);
  EXPECT_EQ(hit.addrs[0], test::ip("203.0.113.7"));
  EXPECT_EQ(test::get16(r, 0), 0x2222);  // the ID of this client
  EXPECT_EQ(test::get16(r, 10), 0);      // no OPT for a client without EDNS
  EXPECT_EQ(first_ttl(r, again), 290u);  // whole seconds: 10.9 s count as 10
  Query q;
  ASSERT_EQ(parse_query(test::make_query(again), q), WireError::none);
  ResponseInfo info;
  ASSERT_EQ(parse_response(r, q, info), WireError::none);
  EXPECT_EQ(test::get32(r, info.ttl_offsets[1]), 390u);  // every TTL is decremented

  // Another type, another name: misses.
  EXPECT_TRUE(lookup(c, {.type = qtype::AAAA}, t0).empty());
  EXPECT_TRUE(lookup(c, {.name = "ftp.example.com"}, t0).empty());
  // Expired at the lifetime (the smallest TTL, 300 s), and removed.
  EXPECT_FALSE(lookup(c, spec, t0 + seconds(299)).empty());
  EXPECT_TRUE(lookup(c, spec, t0 + seconds(300)).empty());
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.bytes(), 0u);
}

TEST(Cache, NegativeAnswers) {
  Cache c(CacheLimits{.max_negative_ttl = 100});
  const QuerySpec spec{};
  const Exchange x = nxdomain(spec, 60);
  ASSERT_TRUE(x.info.negative);
  c.insert(x.q, x.upstream, x.info, t0);
  Cache::Hit hit;
  const Bytes r = lookup(c, spec, t0 + seconds(30), 512, &hit);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(hit.rcode, Rcode::nxdomain);
  EXPECT_EQ(test::get16(r, 2) & 0xf, 3);
  // The SOA record's TTL of 3600 was capped at the negative ceiling, then decremented.
  EXPECT_EQ(first_ttl(r, spec), 70u);
  EXPECT_TRUE(lookup(c, spec, t0 + seconds(60)).empty());

  // The negative ceiling also caps the lifetime.
  const Exchange y = nxdomain(spec, 7200);
  c.insert(y.q, y.upstream, y.info, t0);
  EXPECT_FALSE(lookup(c, spec, t0 + seconds(99)).empty());
  EXPECT_TRUE(lookup(c, spec, t0 + seconds(100)).empty());

  // No SOA: a lifetime of 0, not stored.
  const Exchange z = exchange(spec, test::response_to(spec, 0, 0, 0, 3));
  c.insert(z.q, z.upstream, z.info, t0);
  EXPECT_EQ(c.size(), 0u);
  // ... unless the floor lifts it.
  Cache floored(CacheLimits{.min_ttl = 5});
  floored.insert(z.q, z.upstream, z.info, t0);
  EXPECT_EQ(floored.size(), 1u);
}

TEST(Cache, TtlFloorAndCeiling) {
  Cache c(CacheLimits{.min_ttl = 30, .max_ttl = 600});
  const QuerySpec low{.name = "low.example.com"};
  const QuerySpec high{.name = "high.example.com"};
  const Exchange a = positive(low, 5);
  const Exchange b = positive(high, 100'000);
  c.insert(a.q, a.upstream, a.info, t0);
  c.insert(b.q, b.upstream, b.info, t0);
  EXPECT_EQ(first_ttl(lookup(c, low, t0), low), 30u);
  EXPECT_EQ(first_ttl(lookup(c, high, t0), high), 600u);
  EXPECT_FALSE(lookup(c, low, t0 + seconds(29)).empty());
  EXPECT_TRUE(lookup(c, high, t0 + seconds(600)).empty());
}

TEST(Cache, DoBitSeparatesKeys) {
  Cache c;
  const QuerySpec plain{.edns = true};
  const QuerySpec dnssec{.edns = true, .do_bit = true};
  const Exchange x = positive(plain);
  c.insert(x.q, x.upstream, x.info, t0);
  EXPECT_FALSE(lookup(c, plain, t0).empty());
  EXPECT_TRUE(lookup(c, dnssec, t0).empty());
  // EDNS without DO and no EDNS at all share the key.
  EXPECT_FALSE(lookup(c, QuerySpec{}, t0).empty());
}

TEST(Cache, LruByEntries) {
  Cache c(CacheLimits{.entries = 2});
  const QuerySpec a{.name = "a.example.com"}, b{.name = "b.example.com"},
      d{.name = "d.example.com"};
  for (const QuerySpec* s : {&a, &b}) {
    const Exchange x = positive(*s);
    c.insert(x.q, x.upstream, x.info, t0);
  }
  EXPECT_FALSE(lookup(c, a, t0).empty());  // a is now the most recently used
  const Exchange x = positive(d);
  c.insert(x.q, x.upstream, x.info, t0);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.evictions(), 1u);
  EXPECT_FALSE(lookup(c, a, t0).empty());
  EXPECT_TRUE(lookup(c, b, t0).empty());
  EXPECT_FALSE(lookup(c, d, t0).empty());
}

TEST(Cache, LruByBytes) {
  const QuerySpec a{.name = "a.example.com"}, b{.name = "b.example.com"},
      d{.name = "d.example.com"};
  const Exchange xa = positive(a), xb = positive(b), xd = positive(d);
  const std::size_t one = xa.upstream.size() - 11;
  Cache c(CacheLimits{.bytes = 2 * one + one / 2});
  c.insert(xa.q, xa.upstream, xa.info, t0);
  c.insert(xb.q, xb.upstream, xb.info, t0);
  EXPECT_EQ(c.bytes(), 2 * one);
  c.insert(xd.q, xd.upstream, xd.info, t0);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.bytes(), 2 * one);
  EXPECT_TRUE(lookup(c, a, t0).empty());  // the least recently used went
  EXPECT_FALSE(lookup(c, b, t0).empty());
  EXPECT_FALSE(lookup(c, d, t0).empty());
  // Replacing an entry does not count it twice.
  c.insert(xd.q, xd.upstream, xd.info, t0);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.bytes(), 2 * one);
}

TEST(Cache, NotStored) {
  const QuerySpec spec{};
  const Exchange x = positive(spec);
  Cache small(CacheLimits{.max_entry_bytes = x.upstream.size() - 12});
  small.insert(x.q, x.upstream, x.info, t0);
  EXPECT_EQ(small.size(), 0u);  // oversize (even without its OPT)

  Cache c;
  Msg tc = test::response_to(spec, 1, 0, 0, 0, kFlagTC);
  tc.rr_at(12, qtype::A, 300, addr_rdata("203.0.113.7"));
  const Exchange t = exchange(spec, tc);
  c.insert(t.q, t.upstream, t.info, t0);
  EXPECT_EQ(c.size(), 0u);  // truncated

  Msg sf = test::response_to(spec, 0, 1, 0, 2);
  sf.rr("example.com", qtype::SOA, 300, test::soa_rdata(300));
  const Exchange s = exchange(spec, sf);
  c.insert(s.q, s.upstream, s.info, t0);
  EXPECT_EQ(c.size(), 0u);  // SERVFAIL

  const Exchange zero = positive(spec, 0);
  c.insert(zero.q, zero.upstream, zero.info, t0);
  EXPECT_EQ(c.size(), 0u);  // TTL 0
}

TEST(Cache, ClientSpecificParts) {
  Cache c;
  const Exchange x = positive({});
  c.insert(x.q, x.upstream, x.info, t0);

  // The client's question case, its RD bit and, for EDNS, our OPT with its DO bit.
  const QuerySpec mixed{.name = "WwW.eXaMpLe.CoM", .id = 0x0102, .flags = 0, .edns = true};
  const Bytes pkt = test::make_query(mixed);
  Query q;
  ASSERT_EQ(parse_query(pkt, q), WireError::none);
  Bytes out(4096);
  const Cache::Hit hit = c.lookup(pkt, q, t0, 1232, 1400, out);
  ASSERT_GT(hit.size, 0u);
  const std::span<const std::uint8_t> r(out.data(), hit.size);
  EXPECT_TRUE(std::equal(pkt.begin() + 12, pkt.begin() + q.question_end, r.begin() + 12));
  EXPECT_EQ(test::get16(r, 0), 0x0102);
  EXPECT_EQ(test::get16(r, 2) & kFlagRD, 0);
  EXPECT_NE(test::get16(r, 2) & kFlagQR, 0);
  ResponseInfo info;
  ASSERT_EQ(parse_response(r, q, info), WireError::none);
  EXPECT_EQ(info.opt_len, 11u);
  EXPECT_EQ(test::get16(r, info.opt_offset + 3), 1400);
  EXPECT_EQ(info.addrs.size(), 1u);

  // Past the limit: the question and TC only (and the OPT), the addresses still reported.
  const Exchange big = [] {
    const QuerySpec s{.name = "big.example.com"};
    Msg m = test::response_to(s, 40, 0, 0);
    for (int i = 0; i < 40; ++i) m.rr_at(12, qtype::A, 300, addr_rdata("203.0.113.9"));
    return exchange(s, m);
  }();
  c.insert(big.q, big.upstream, big.info, t0);
  Cache::Hit cut;
  const Bytes tc = lookup(c, {.name = "big.example.com"}, t0, 512, &cut);
  ASSERT_EQ(tc.size(), big.q.question_end);
  EXPECT_NE(test::get16(tc, 2) & kFlagTC, 0);
  EXPECT_EQ(test::get16(tc, 6), 0);
  EXPECT_EQ(cut.addrs.size(), 40u);

  // Too small a buffer is a miss, not a partial write.
  EXPECT_EQ(c.lookup(pkt, q, t0, 1232, 1400, std::span(out).first(20)).size, 0u);
}

}  // namespace
}  // namespace vibepit::dns
