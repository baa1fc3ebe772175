#pragma once
// DNS messages on the wire (RFC 1035, EDNS0 RFC 6891): a strict parser for queries and for
// upstream responses, and builders for the replies the server writes itself. Pure: no I/O,
// no clocks. Every function works on caller-provided buffers; parsing a query allocates
// nothing, so the denied-query and cache-hit paths stay allocation-free.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "vibepit/policy/ip.hpp"

namespace vibepit::dns {

enum class Rcode : std::uint8_t {
  noerror = 0,
  formerr = 1,
  servfail = 2,
  nxdomain = 3,
  notimp = 4,
  refused = 5,
};
std::string_view to_string(Rcode r);  // "NOERROR", "FORMERR", ...

namespace qtype {
inline constexpr std::uint16_t A = 1, NS = 2, CNAME = 5, SOA = 6, PTR = 12, HINFO = 13, MX = 15,
                               TXT = 16, AAAA = 28, SRV = 33, OPT = 41, SVCB = 64, HTTPS = 65,
                               AXFR = 252, ANY = 255;
}
inline constexpr std::uint16_t kClassIN = 1;

inline constexpr std::size_t kHeaderSize = 12;
inline constexpr std::size_t kMaxWireName = 255;  // octets, RFC 1035 2.3.4
inline constexpr std::size_t kMaxLabel = 63;
// Room for the text form of the longest wire name with every octet escaped as \DDD.
inline constexpr std::size_t kMaxNameText = 4 * kMaxWireName;
inline constexpr std::uint16_t kPlainUdpLimit = 512;  // a client without EDNS

// Header flag bits (in the 16-bit flags word).
inline constexpr std::uint16_t kFlagQR = 0x8000, kFlagAA = 0x0400, kFlagTC = 0x0200,
                               kFlagRD = 0x0100, kFlagRA = 0x0080, kFlagAD = 0x0020,
                               kFlagCD = 0x0010;

// Why a message was not accepted.
enum class WireError {
  none,
  short_header,       // fewer than 12 octets: no reply is possible
  is_response,        // QR set on a query: dropped, never answered (no reflection loops)
  bad_opcode,         // not QUERY: NOTIMP
  bad_qdcount,        // QDCOUNT != 1: FORMERR
  truncated,          // the message ends inside a name, a question or a record
  bad_label,          // a label type other than 0b00 or 0b11, or a label longer than 63
  name_too_long,      // a name longer than 255 octets on the wire
  pointer_loop,       // pointers that loop, point forward, lead back over their own name,
                      // or chain too long
  pointer_range,      // a compression pointer outside the message or into the header, any
                      // pointer in a query's question name, or (in a response) a pointer
                      // that leads into a TTL field, which the cache rewrites
  bad_opt,            // more than one OPT, OPT not owned by the root, OPT outside additional,
                      // malformed options, or a later name that points into or past the OPT
  trailing_bytes,     // bytes after the last record, answer or authority records in a query,
                      // or a message longer than 65535 octets
  question_mismatch,  // a response whose question is not the one we asked (or QR clear)
  bad_rdata,          // record data that does not fit its type (A not 4 octets, bad SvcParams)
};
std::string_view to_string(WireError e);  // a short phrase for logs and decision records

// A domain name in text form: ASCII letters lower-cased, no trailing dot, "." for the root.
// Octets outside [A-Za-z0-9-_*] and '.' or '\' inside a label are written as \DDD or \. so
// that no wire name can masquerade as another in text; `plain` tells whether the name had
// none of them (only a plain name can ever match an allow-dns rule).
struct Name {
  std::array<char, kMaxNameText> text{};
  std::uint16_t len = 0;
  std::uint8_t labels = 0;
  bool plain = true;
  std::string_view view() const { return {text.data(), len}; }
};

// A parsed query. `question_begin`/`question_end` delimit the question in the packet, so
// replies can echo the client's own bytes (its case, RFC 5452 0x20 randomisation included).
struct Query {
  std::uint16_t id = 0;
  std::uint16_t flags = 0;  // the raw flags word
  Name qname;
  std::uint16_t qtype = 0;
  std::uint16_t qclass = 0;
  std::size_t question_begin = kHeaderSize;
  std::size_t question_end = kHeaderSize;
  bool edns = false;              // the query carried an OPT record
  std::uint8_t edns_version = 0;  // from the OPT TTL field
  std::uint16_t udp_payload = 0;  // the client's advertised size, as sent (0 without EDNS)
  bool do_bit = false;            // DNSSEC OK
  bool rd() const { return (flags & kFlagRD) != 0; }
  std::uint8_t opcode() const { return static_cast<std::uint8_t>((flags >> 11) & 0xf); }
};

// Parse a query strictly. On error, `out.id` and `out.flags` are still set whenever the
// header was complete, so that an error reply can be built.
WireError parse_query(std::span<const std::uint8_t> pkt, Query& out);

// The size limit of a UDP reply to this query: 512 without EDNS, else the client's payload
// size clamped to [512, server_max].
std::size_t udp_reply_limit(const Query& q, std::size_t server_max);

// Reply builders. Each writes into `out` and returns the size, or 0 when `out` is too small.
// Replies carry QR, the query's ID, RD copied, RA set, and an OPT record (with `our_payload`)
// when the query had one. `pkt` is the client's query, whose question bytes are echoed.

// A reply with the question and no records: REFUSED, NXDOMAIN, SERVFAIL, FORMERR, NOTIMP.
// For a query whose question could not be parsed, pass q.question_end == q.question_begin:
// the reply then has QDCOUNT 0.
std::size_t build_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rcode,
                        std::uint16_t our_payload, std::span<std::uint8_t> out);
// The RFC 8482 minimal answer to ANY: one HINFO record, CPU "RFC8482", OS "", `ttl`.
std::size_t build_any_hinfo(std::span<const std::uint8_t> pkt, const Query& q, std::uint32_t ttl,
                            std::uint16_t our_payload, std::span<std::uint8_t> out);
// The query we send upstream: a fresh header (ID 0; c-ares sets its own), RD as the client
// asked, the client's question bytes, and an OPT with `our_payload` and the client's DO bit.
// No other client option (ECS, cookies, ...) leaves the appliance.
std::size_t build_upstream_query(std::span<const std::uint8_t> pkt, const Query& q,
                                 std::uint16_t our_payload, std::span<std::uint8_t> out);

// Whether `answer` is an answer to `sent`, a query we built whose question ends at
// `question_end`: the same ID, QR set, QDCOUNT 1, and the same question octets (the name's
// ASCII letters without case, then type and class exactly). A cheap test for matching
// datagrams to the queries in flight; parse_response then validates the whole answer.
bool answers_query(std::span<const std::uint8_t> answer, std::span<const std::uint8_t> sent,
                   std::size_t question_end);

// What the server needs to know about an upstream response.
struct ResponseInfo {
  Rcode rcode = Rcode::noerror;  // the low 4 bits; extended rcodes are treated as SERVFAIL
  bool tc = false;
  bool negative = false;  // NXDOMAIN, or NOERROR with no answer of the asked type (NODATA)
  // Every A and AAAA record in every section (answer, authority, additional: whatever its
  // owner, so a CNAME chain's targets and glue are included), then every ipv4hint/ipv6hint
  // of HTTPS and SVCB records. The whole message goes back to the client, so these are what
  // the rebinding defence classifies.
  std::vector<policy::IpAddr> addrs;
  // The cache lifetime: the smallest TTL of the answer and authority records; for a
  // negative answer, min(SOA TTL, SOA MINIMUM) (RFC 2308), 0 when there is no SOA.
  std::uint32_t ttl = 0;
  // Offsets of the 32-bit TTL field of every record except OPT, for patching cached copies.
  std::vector<std::uint16_t> ttl_offsets;
  // Where the OPT record is, to strip it for clients that sent none; opt_len 0 when absent.
  std::size_t opt_offset = 0;
  std::size_t opt_len = 0;
  std::size_t question_end = 0;  // the end of the response's question
};

// Parse an upstream response strictly and check that its question matches `q` (name
// compared without case, type, class). Fills `info`; `info.addrs` and `info.ttl_offsets` are
// cleared first and reuse their capacity.
WireError parse_response(std::span<const std::uint8_t> pkt, const Query& q, ResponseInfo& info);

// Turn a validated upstream response into the client's reply: the client's ID and question
// bytes, the upstream's records, the OPT record removed (and one with `our_payload` added
// when the client sent EDNS). When the result would exceed `limit`, the reply is cut to the
// header and question with TC set. Returns the size, or 0 when `out` is too small.
std::size_t build_reply_from_upstream(std::span<const std::uint8_t> upstream,
                                      const ResponseInfo& info, std::span<const std::uint8_t> pkt,
                                      const Query& q, std::size_t limit, std::uint16_t our_payload,
                                      std::span<std::uint8_t> out);

}  // namespace vibepit::dns
