#pragma once
// Helpers shared by the parser, the builders, the cache and the UDP forwarder. Internal to dns/.
#include <cstddef>
#include <cstdint>
#include <span>

#include "vibepit/dns/wire.hpp"

namespace vibepit::dns::detail {

inline constexpr std::size_t kOptSize = 11;        // root owner, type, class, TTL, RDLENGTH 0
inline constexpr std::size_t kMaxMessage = 65535;  // the most a DNS message can frame (TCP)
// Header offsets.
inline constexpr std::size_t kOffFlags = 2, kOffQd = 4, kOffAn = 6, kOffNs = 8, kOffAr = 10;

inline std::uint16_t get16(std::span<const std::uint8_t> p, std::size_t at) {
  return static_cast<std::uint16_t>((p[at] << 8) | p[at + 1]);
}
inline std::uint32_t get32(std::span<const std::uint8_t> p, std::size_t at) {
  return (std::uint32_t{p[at]} << 24) | (std::uint32_t{p[at + 1]} << 16) |
         (std::uint32_t{p[at + 2]} << 8) | std::uint32_t{p[at + 3]};
}
inline void put16(std::span<std::uint8_t> p, std::size_t at, std::uint16_t v) {
  p[at] = static_cast<std::uint8_t>(v >> 8);
  p[at + 1] = static_cast<std::uint8_t>(v);
}
inline void put32(std::span<std::uint8_t> p, std::size_t at, std::uint32_t v) {
  put16(p, at, static_cast<std::uint16_t>(v >> 16));
  put16(p, at + 2, static_cast<std::uint16_t>(v));
}

// RFC 2181 8: a TTL with the top bit set is read as 0.
inline std::uint32_t sane_ttl(std::uint32_t ttl) {
  return (ttl & 0x80000000u) ? 0 : ttl;
}

// The flags of a reply built from an upstream answer: the upstream's bits (TC included, so the
// client retries over TCP), with QR and RA set, the client's RD, and the rcode the parser
// settled on (an extended rcode, whose high bits left with the OPT, folds into SERVFAIL).
inline std::uint16_t reply_flags(std::uint16_t upstream_flags, const Query& q, Rcode rcode) {
  auto f = static_cast<std::uint16_t>(upstream_flags & ~(kFlagRD | 0x000f));
  f |= kFlagQR | kFlagRA | (q.flags & kFlagRD) | static_cast<std::uint16_t>(rcode);
  return f;
}

// Writes the reply header (the query's ID, `flags`, QDCOUNT 1 when the query has a question,
// NSCOUNT and ARCOUNT 0) and the client's question bytes. Returns the end, or 0 when `out`
// is too small or the question bounds lie outside `pkt`.
std::size_t write_reply_head(std::span<const std::uint8_t> pkt, const Query& q, std::uint16_t flags,
                             std::uint16_t ancount, std::span<std::uint8_t> out);
// Appends our OPT at `at` when the client sent EDNS and counts it in ARCOUNT. Returns the new
// end (`at` unchanged without EDNS), or 0 when `out` is too small.
std::size_t append_opt(const Query& q, std::uint16_t our_payload, std::size_t at,
                       std::span<std::uint8_t> out);

// The parts of an answer that a reply is assembled from: records after the question (in up
// to two pieces, so an OPT in the middle can be left out) and the header fields.
struct ReplyParts {
  std::uint16_t flags = 0;  // without TC; the assembler adds it when it cuts the reply
  std::uint16_t ancount = 0, nscount = 0, arcount = 0;  // arcount without any OPT
  std::span<const std::uint8_t> records1, records2;
};

struct Assembled {
  std::size_t size = 0;  // 0: `out` too small, or the client's question is unusable
  bool truncated = false;
};

// Writes the client's reply: its ID and question bytes, the records, and an OPT with
// `our_payload` when the client sent EDNS. Past `limit` the records are dropped and TC set.
Assembled assemble_reply(const ReplyParts& parts, std::span<const std::uint8_t> pkt, const Query& q,
                         std::size_t limit, std::uint16_t our_payload, std::span<std::uint8_t> out);

}  // namespace vibepit::dns::detail
