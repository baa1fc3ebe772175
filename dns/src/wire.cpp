// Names for logs, the UDP size rule, and the reply assembler shared with the cache.
#include <algorithm>
#include <cstring>

#include "vibepit/dns/wire.hpp"
#include "wire_detail.hpp"

namespace vibepit::dns {

std::string_view to_string(Rcode r) {
  switch (r) {
    case Rcode::noerror:
      return "NOERROR";
    case Rcode::formerr:
      return "FORMERR";
    case Rcode::servfail:
      return "SERVFAIL";
    case Rcode::nxdomain:
      return "NXDOMAIN";
    case Rcode::notimp:
      return "NOTIMP";
    case Rcode::refused:
      return "REFUSED";
  }
  return "RCODE?";
}

std::string_view to_string(WireError e) {
  switch (e) {
    case WireError::none:
      return "ok";
    case WireError::short_header:
      return "short header";
    case WireError::is_response:
      return "QR set in a query";
    case WireError::bad_opcode:
      return "opcode not QUERY";
    case WireError::bad_qdcount:
      return "QDCOUNT not 1";
    case WireError::truncated:
      return "message truncated";
    case WireError::bad_label:
      return "bad label";
    case WireError::name_too_long:
      return "name too long";
    case WireError::pointer_loop:
      return "compression pointer loop";
    case WireError::pointer_range:
      return "compression pointer out of range";
    case WireError::bad_opt:
      return "bad OPT record";
    case WireError::trailing_bytes:
      return "trailing bytes";
    case WireError::question_mismatch:
      return "question mismatch";
    case WireError::bad_rdata:
      return "bad record data";
  }
  return "wire error?";
}

std::size_t udp_reply_limit(const Query& q, std::size_t server_max) {
  if (!q.edns) return kPlainUdpLimit;
  const std::size_t floor = kPlainUdpLimit;  // RFC 6891 6.2.5: below 512 means 512
  return std::max(floor, std::min<std::size_t>(q.udp_payload, server_max));
}

namespace detail {

namespace {
// An OPT with no options: our payload size, version 0, the client's DO bit.
void write_opt(std::span<std::uint8_t> out, std::size_t at, std::uint16_t payload, bool do_bit) {
  out[at] = 0;
  put16(out, at + 1, qtype::OPT);
  put16(out, at + 3, payload);
  put32(out, at + 5, do_bit ? 0x8000u : 0u);
  put16(out, at + 9, 0);
}
}  // namespace

std::size_t write_reply_head(std::span<const std::uint8_t> pkt, const Query& q, std::uint16_t flags,
                             std::uint16_t ancount, std::span<std::uint8_t> out) {
  const bool has_question = q.question_end > q.question_begin;
  if (q.question_end < q.question_begin || q.question_end > pkt.size()) return 0;
  const std::size_t qlen = q.question_end - q.question_begin;
  if (out.size() < kHeaderSize + qlen) return 0;
  put16(out, 0, q.id);
  put16(out, kOffFlags, flags);
  put16(out, kOffQd, has_question ? 1 : 0);
  put16(out, kOffAn, ancount);
  put16(out, kOffNs, 0);
  put16(out, kOffAr, 0);
  if (qlen != 0) std::memcpy(out.data() + kHeaderSize, pkt.data() + q.question_begin, qlen);
  return kHeaderSize + qlen;
}

std::size_t append_opt(const Query& q, std::uint16_t our_payload, std::size_t at,
                       std::span<std::uint8_t> out) {
  if (!q.edns) return at;
  if (out.size() < at + kOptSize) return 0;
  write_opt(out, at, our_payload, q.do_bit);
  put16(out, kOffAr, static_cast<std::uint16_t>(get16(out, kOffAr) + 1));
  return at + kOptSize;
}

Assembled assemble_reply(const ReplyParts& parts, std::span<const std::uint8_t> pkt, const Query& q,
                         std::size_t limit, std::uint16_t our_payload,
                         std::span<std::uint8_t> out) {
  if (q.question_end <= q.question_begin) return {};
  const std::size_t head = kHeaderSize + (q.question_end - q.question_begin);
  const std::size_t opt = q.edns ? kOptSize : 0;
  const std::size_t full = head + parts.records1.size() + parts.records2.size() + opt;
  const bool cut = full > limit;
  const auto flags = static_cast<std::uint16_t>(parts.flags | (cut ? kFlagTC : 0));
  std::size_t at = write_reply_head(pkt, q, flags, cut ? 0 : parts.ancount, out);
  if (at == 0) return {};
  if (!cut) {
    if (out.size() < full) return {};
    put16(out, kOffNs, parts.nscount);
    put16(out, kOffAr, parts.arcount);
    if (!parts.records1.empty()) {
      std::memcpy(out.data() + at, parts.records1.data(), parts.records1.size());
      at += parts.records1.size();
    }
    if (!parts.records2.empty()) {
      std::memcpy(out.data() + at, parts.records2.data(), parts.records2.size());
      at += parts.records2.size();
    }
  }
  at = append_opt(q, our_payload, at, out);
  return {at, cut};
}

}  // namespace detail
}  // namespace vibepit::dns
