// libFuzzer target: DNS messages from the network. The input is parsed as a client query and
// as an upstream response to fixed queries; whatever parses goes through the builders and the
// cache, and their output must parse back to the same facts. Invariants use CHECK, which
// aborts even in release builds.
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "vibepit/dns/cache.hpp"
#include "vibepit/dns/wire.hpp"

namespace {

using namespace vibepit::dns;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint16_t kPayload = 1232;
// Room for any reply: a response of at most 65535 octets, less its OPT, plus ours.
std::array<std::uint8_t, 65536 + 64> g_out;
std::array<std::uint8_t, 65536 + 64> g_out2;

struct Fixed {
  Bytes pkt;
  Query q;
};

// www.example.com, asked in mixed case so the reply's echo of it is visible.
Bytes fixed_query(std::uint16_t type, bool edns) {
  Bytes b = {0x12,
             0x34,
             0x01,
             0x00,
             0,
             1,
             0,
             0,
             0,
             0,
             0,
             edns ? std::uint8_t{1} : std::uint8_t{0},
             3,
             'W',
             'w',
             'W',
             7,
             'e',
             'X',
             'a',
             'M',
             'p',
             'L',
             'e',
             3,
             'C',
             'o',
             'M',
             0,
             static_cast<std::uint8_t>(type >> 8),
             static_cast<std::uint8_t>(type),
             0,
             1};
  if (edns) b.insert(b.end(), {0, 0, 41, 0x10, 0x00, 0, 0, 0x80, 0, 0, 0});  // 4096, DO
  return b;
}

const std::array<Fixed, 2>& fixed() {
  static const std::array<Fixed, 2> f = [] {
    std::array<Fixed, 2> out{Fixed{fixed_query(qtype::A, false), {}},
                             Fixed{fixed_query(qtype::HTTPS, true), {}}};
    for (Fixed& x : out) CHECK(parse_query(x.pkt, x.q) == WireError::none);
    return out;
  }();
  return f;
}

bool text_char_ok(char c, bool plain) {
  if (c >= 'A' && c <= 'Z') return false;  // always lower-cased
  if (plain)
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '*' ||
           c == '.';
  return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f;
}

void check_name(const Name& n) {
  CHECK(n.len > 0 && n.len <= kMaxNameText);
  CHECK((n.labels == 0) == (n.view() == "."));
  bool escaped = false;
  for (char c : n.view()) {
    CHECK(text_char_ok(c, n.plain));
    escaped = escaped || c == '\\';
  }
  CHECK(escaped == !n.plain);
}

// The reply parses back as a response to `q` with its rcode and no addresses.
void check_own_reply(std::size_t n, const Query& q, Rcode rcode, std::size_t answers) {
  CHECK(n >= kHeaderSize);
  ResponseInfo info;
  CHECK(parse_response(std::span(g_out).first(n), q, info) == WireError::none);
  CHECK(info.rcode == rcode);
  CHECK(info.addrs.empty());
  CHECK(info.ttl_offsets.size() == answers);
  CHECK((info.opt_len != 0) == q.edns);
}

void check_as_query(std::span<const std::uint8_t> in) {
  Query q;
  const WireError e = parse_query(in, q);
  CHECK(!to_string(e).empty());
  CHECK(q.question_begin == kHeaderSize && q.question_end >= q.question_begin);
  CHECK(q.question_end == kHeaderSize || q.question_end <= in.size());
  if (e == WireError::short_header) {
    CHECK(in.size() < kHeaderSize);
    return;
  }
  CHECK(in.size() >= kHeaderSize);
  if (e != WireError::none) {
    if (e == WireError::is_response) return;
    // An error reply is always possible; with a question it reads back as a response.
    const std::size_t n = build_error(in, q, Rcode::formerr, kPayload, g_out);
    CHECK(n >= kHeaderSize);
    if (q.question_end > q.question_begin) {
      check_own_reply(n, q, Rcode::formerr, 0);
    } else {
      CHECK(n == kHeaderSize && !q.edns);
    }
    return;
  }
  check_name(q.qname);
  CHECK(q.opcode() == 0 && (q.flags & kFlagQR) == 0);
  const std::size_t limit = udp_reply_limit(q, 4096);
  CHECK(limit >= 512 && limit <= 4096);

  std::size_t n = build_error(in, q, Rcode::refused, kPayload, g_out);
  check_own_reply(n, q, Rcode::refused, 0);
  CHECK(n == q.question_end + (q.edns ? 11 : 0));
  n = build_any_hinfo(in, q, 3600, kPayload, g_out);
  check_own_reply(n, q, Rcode::noerror, 1);

  n = build_upstream_query(in, q, kPayload, g_out);
  CHECK(n == q.question_end + 11);
  Query up;
  CHECK(parse_query(std::span(g_out).first(n), up) == WireError::none);
  CHECK(up.id == 0 && (up.flags & ~(kFlagRD | kFlagCD)) == 0);
  CHECK(up.qname.view() == q.qname.view() && up.qtype == q.qtype && up.qclass == q.qclass);
  CHECK(up.edns && up.udp_payload == kPayload && up.do_bit == q.do_bit);
}

// Copies `n` octets of `buf` with every TTL field zeroed, so two replies that differ only in
// TTLs compare equal.
Bytes without_ttls(std::span<const std::uint8_t> buf, const Query& q) {
  ResponseInfo info;
  CHECK(parse_response(buf, q, info) == WireError::none);
  Bytes b(buf.begin(), buf.end());
  for (std::uint16_t off : info.ttl_offsets) std::memset(b.data() + off, 0, 4);
  return b;
}

void check_as_response(std::span<const std::uint8_t> in, const Fixed& f) {
  ResponseInfo info;
  if (parse_response(in, f.q, info) != WireError::none) return;
  CHECK(info.question_end == f.q.question_end);
  CHECK(info.opt_len == 0 ||
        (info.opt_offset >= info.question_end && info.opt_offset + info.opt_len <= in.size()));
  for (std::uint16_t off : info.ttl_offsets) {
    CHECK(off >= info.question_end && off + 4u <= in.size());
  }
  CHECK(!info.negative || info.rcode == Rcode::noerror || info.rcode == Rcode::nxdomain);

  // The client's copy, in full: the upstream's bytes less its OPT, plus ours.
  const std::size_t n =
      build_reply_from_upstream(in, info, f.pkt, f.q, g_out.size(), kPayload, g_out);
  CHECK(n == in.size() - info.opt_len + (f.q.edns ? 11 : 0));
  const auto reply = std::span<const std::uint8_t>(g_out).first(n);
  CHECK(std::memcmp(reply.data() + kHeaderSize, f.pkt.data() + kHeaderSize,
                    f.q.question_end - kHeaderSize) == 0);
  ResponseInfo again;
  CHECK(parse_response(reply, f.q, again) == WireError::none);
  CHECK(again.addrs == info.addrs);
  CHECK(again.rcode == info.rcode && again.tc == info.tc);
  CHECK(again.negative == info.negative && again.ttl == info.ttl);
  CHECK(again.ttl_offsets.size() == info.ttl_offsets.size());

  // Cut to 512: either all of it fits or only the question is left, with TC.
  const std::size_t cut = build_reply_from_upstream(in, info, f.pkt, f.q, 512, kPayload, g_out2);
  CHECK(cut == (n <= 512 ? n : f.q.question_end + (f.q.edns ? 11 : 0)));
  if (n > 512) CHECK(g_out2[2] & (kFlagTC >> 8));

  // The cache gives the same reply, up to the TTLs.
  Cache cache;
  const auto now = Cache::clock::time_point{};
  cache.insert(f.q, in, info, now);
  const Cache::Hit hit = cache.lookup(f.pkt, f.q, now, g_out2.size(), kPayload, g_out2);
  if (cache.size() == 0) {
    CHECK(hit.size == 0);
    return;
  }
  CHECK(!info.tc && (info.rcode == Rcode::noerror || info.rcode == Rcode::nxdomain));
  CHECK(hit.size == n && hit.rcode == info.rcode);
  CHECK(hit.addrs.size() == info.addrs.size());
  CHECK(without_ttls(reply, f.q) == without_ttls(std::span(g_out2).first(hit.size), f.q));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  check_as_query(in);
  for (const Fixed& f : fixed()) check_as_response(in, f);
  return 0;
}
