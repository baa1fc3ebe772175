// The builders: replies the server writes itself, the query it sends upstream, and the
// client's copy of an upstream answer.
#include <cstring>

#include "vibepit/dns/wire.hpp"
#include "wire_detail.hpp"

namespace vibepit::dns {

using namespace detail;

namespace {
// Our own replies: QR and RA set; opcode and RD as the client sent them.
std::uint16_t own_flags(const Query& q, Rcode rcode) {
  return static_cast<std::uint16_t>(kFlagQR | kFlagRA | (q.flags & (0x7800 | kFlagRD)) |
                                    static_cast<std::uint16_t>(rcode));
}
}  // namespace

std::size_t build_error(std::span<const std::uint8_t> pkt, const Query& q, Rcode rcode,
                        std::uint16_t our_payload, std::span<std::uint8_t> out) {
  const std::size_t at = write_reply_head(pkt, q, own_flags(q, rcode), 0, out);
  if (at == 0) return 0;
  return append_opt(q, our_payload, at, out);
}

std::size_t build_any_hinfo(std::span<const std::uint8_t> pkt, const Query& q, std::uint32_t ttl,
                            std::uint16_t our_payload, std::span<std::uint8_t> out) {
  static constexpr std::uint8_t kRdata[] = {7, 'R', 'F', 'C', '8', '4', '8', '2', 0};
  if (q.question_end <= q.question_begin) return 0;
  std::size_t at = write_reply_head(pkt, q, own_flags(q, Rcode::noerror), 1, out);
  if (at == 0 || out.size() < at + 12 + sizeof kRdata) return 0;
  // The owner points at the question name, which always starts right after the header.
  put16(out, at, static_cast<std::uint16_t>(0xc000 | kHeaderSize));
  put16(out, at + 2, qtype::HINFO);
  put16(out, at + 4, q.qclass);
  put32(out, at + 6, ttl);
  put16(out, at + 10, sizeof kRdata);
  std::memcpy(out.data() + at + 12, kRdata, sizeof kRdata);
  at += 12 + sizeof kRdata;
  return append_opt(q, our_payload, at, out);
}

std::size_t build_upstream_query(std::span<const std::uint8_t> pkt, const Query& q,
                                 std::uint16_t our_payload, std::span<std::uint8_t> out) {
  if (q.question_end <= q.question_begin || q.question_end > pkt.size()) return 0;
  const std::size_t qlen = q.question_end - q.question_begin;
  const std::size_t size = kHeaderSize + qlen + kOptSize;
  if (out.size() < size) return 0;
  put16(out, 0, 0);
  put16(out, kOffFlags, static_cast<std::uint16_t>(q.flags & (kFlagRD | kFlagCD)));
  put16(out, kOffQd, 1);
  put16(out, kOffAn, 0);
  put16(out, kOffNs, 0);
  put16(out, kOffAr, 1);
  std::memcpy(out.data() + kHeaderSize, pkt.data() + q.question_begin, qlen);
  // Always EDNS upstream, whatever the client sent: larger answers, fewer TCP retries.
  std::size_t at = kHeaderSize + qlen;
  out[at] = 0;
  put16(out, at + 1, qtype::OPT);
  put16(out, at + 3, our_payload);
  put32(out, at + 5, q.do_bit ? 0x8000u : 0u);
  put16(out, at + 9, 0);
  return size;
}

std::size_t build_reply_from_upstream(std::span<const std::uint8_t> upstream,
                                      const ResponseInfo& info, std::span<const std::uint8_t> pkt,
                                      const Query& q, std::size_t limit, std::uint16_t our_payload,
                                      std::span<std::uint8_t> out) {
  // The response's question matched the client's name without case, so it has the same
  // length, and every compression pointer into it stays valid over the client's bytes.
  if (upstream.size() < kHeaderSize || info.question_end < kHeaderSize ||
      info.question_end > upstream.size() ||
      info.question_end - kHeaderSize != q.question_end - q.question_begin) {
    return 0;
  }
  if (info.opt_len != 0 &&
      (info.opt_offset < info.question_end || info.opt_offset + info.opt_len > upstream.size())) {
    return 0;
  }
  ReplyParts parts;
  parts.flags = reply_flags(get16(upstream, kOffFlags), q, info.rcode);
  parts.ancount = get16(upstream, kOffAn);
  parts.nscount = get16(upstream, kOffNs);
  parts.arcount = get16(upstream, kOffAr);
  if (info.opt_len != 0) {
    if (parts.arcount == 0) return 0;
    // The parser made sure nothing after the OPT points into it or past it.
    parts.arcount = static_cast<std::uint16_t>(parts.arcount - 1);
    parts.records1 = upstream.subspan(info.question_end, info.opt_offset - info.question_end);
    parts.records2 = upstream.subspan(info.opt_offset + info.opt_len);
  } else {
    parts.records1 = upstream.subspan(info.question_end);
  }
  return assemble_reply(parts, pkt, q, limit, our_payload, out).size;
}

}  // namespace vibepit::dns
