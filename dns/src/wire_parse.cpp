// The strict parsers: client queries and upstream responses. Nothing here allocates except
// the address and TTL-offset lists of a response, which reuse their capacity.
#include <algorithm>
#include <limits>

#include "vibepit/dns/wire.hpp"
#include "wire_detail.hpp"

namespace vibepit::dns {
namespace {

using namespace detail;

// Backward-only pointers cannot loop, but a chain of them can still make one name cost many
// steps. A real name of at most 127 labels never needs more hops than that.
constexpr std::size_t kMaxPointerHops = 128;

bool plain_octet(std::uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '*';
}

// Appends one label to the text form. The text cannot overflow: a wire name holds at most
// 254 - labels content octets, each at most 4 characters, plus labels - 1 dots (< 1020).
void append_label(Name& n, std::span<const std::uint8_t> label) {
  if (n.labels != 0) n.text[n.len++] = '.';
  for (std::uint8_t c : label) {
    if (c >= 'A' && c <= 'Z') {
      n.text[n.len++] = static_cast<char>(c + ('a' - 'A'));
    } else if (plain_octet(c)) {
      n.text[n.len++] = static_cast<char>(c);
    } else if (c == '.') {
      // A dot inside a label must not read as a label boundary.
      n.text[n.len++] = '\\';
      n.text[n.len++] = '.';
      n.plain = false;
    } else {
      n.text[n.len++] = '\\';
      n.text[n.len++] = static_cast<char>('0' + c / 100);
      n.text[n.len++] = static_cast<char>('0' + c / 10 % 10);
      n.text[n.len++] = static_cast<char>('0' + c % 10);
      n.plain = false;
    }
  }
  ++n.labels;
}

// What a read that followed a pointer may not touch in a response, because a reply rewrites
// it: the OPT record (from `opt` on; cut out for clients without EDNS), and the TTL fields of
// earlier records (patched by the cache). Real compressors only point at names.
struct Fence {
  std::size_t opt = std::numeric_limits<std::size_t>::max();
  std::span<const std::uint16_t> ttls;  // ascending
};

// True when [begin, end) overlaps a 4-octet TTL field.
bool touches_ttl(std::span<const std::uint16_t> ttls, std::size_t begin, std::size_t end) {
  // The first field that ends after `begin`; begin >= kHeaderSize, so no underflow.
  const auto it = std::upper_bound(ttls.begin(), ttls.end(), begin - 4);
  return it != ttls.end() && *it < end;
}

// Reads the name at `pos`. `end` bounds its inline part (the message end, or the end of the
// rdata that holds it); `next` is set to the offset just after that inline part.
// A pointer must point into the message body (past the header) and strictly before every
// octet of this name read so far, and what it leads to must end before the run of octets
// that held the pointer: a real compressor only points at names written earlier. So the
// targets decrease, nothing can loop, and a name never reads the record it sits in; chains
// are also cut after kMaxPointerHops. What a pointer leads to must stay clear of `fence`:
// below the OPT, so the pointers stay valid once it is cut out (bad_opt), and off TTL fields
// (pointer_range). `out` (may be null) receives the text form.
WireError read_name(std::span<const std::uint8_t> pkt, std::size_t pos, std::size_t end,
                    bool allow_ptr, const Fence& fence, Name* out, std::size_t& next) {
  if (out != nullptr) {
    out->len = 0;
    out->labels = 0;
    out->plain = true;
  }
  std::size_t wire = 0;  // label octets so far, length octets included
  std::size_t hops = 0;
  std::size_t floor = pos;  // where the current run of octets started
  std::size_t limit = end;  // where the current run must end
  WireError past_limit = WireError::truncated;
  bool jumped = false;
  // Checks that the `n` octets at `pos` lie within the run and clear of the TTL fields.
  const auto check_run = [&](std::size_t n) {
    if (pos + n > limit) return pos + n > pkt.size() ? WireError::truncated : past_limit;
    if (jumped && !fence.ttls.empty() && touches_ttl(fence.ttls, pos, pos + n)) {
      return WireError::pointer_range;
    }
    return WireError::none;
  };
  for (;;) {
    WireError e = check_run(1);
    if (e != WireError::none) return e;
    const std::uint8_t len = pkt[pos];
    if ((len & 0xc0) == 0xc0) {
      if (!allow_ptr) return WireError::pointer_range;
      if ((e = check_run(2)) != WireError::none) return e;
      const std::size_t target = (std::size_t{len & 0x3fu} << 8) | pkt[pos + 1];
      if (!jumped) next = pos + 2;
      if (target < kHeaderSize || target >= pkt.size()) return WireError::pointer_range;
      if (target >= floor || ++hops > kMaxPointerHops) return WireError::pointer_loop;
      if (target >= fence.opt) return WireError::bad_opt;
      past_limit = fence.opt < floor ? WireError::bad_opt : WireError::pointer_loop;
      limit = std::min(floor, fence.opt);
      pos = floor = target;
      jumped = true;
      continue;
    }
    if ((len & 0xc0) != 0) return WireError::bad_label;
    if (len == 0) {
      if (!jumped) next = pos + 1;
      if (out != nullptr && out->labels == 0) {
        out->text[0] = '.';
        out->len = 1;
      }
      return WireError::none;
    }
    if ((e = check_run(1 + std::size_t{len})) != WireError::none) return e;
    wire += 1 + std::size_t{len};
    if (wire + 1 > kMaxWireName) return WireError::name_too_long;
    if (out != nullptr) append_label(*out, pkt.subspan(pos + 1, len));
    pos += 1 + std::size_t{len};
  }
}

// A name inside rdata: running past the rdata is a malformed record, not a short message.
WireError read_rdata_name(std::span<const std::uint8_t> pkt, std::size_t pos, std::size_t end,
                          bool allow_ptr, const Fence& fence, std::size_t& next) {
  const WireError e = read_name(pkt, pos, end, allow_ptr, fence, nullptr, next);
  return e == WireError::truncated ? WireError::bad_rdata : e;
}

// EDNS options are (code, length, data) triples that must fill the rdata exactly.
bool opt_options_ok(std::span<const std::uint8_t> pkt, std::size_t pos, std::size_t end) {
  while (pos < end) {
    if (pos + 4 > end) return false;
    pos += 4 + std::size_t{get16(pkt, pos + 2)};
  }
  return pos == end;
}

struct Record {
  std::size_t start = 0;     // the owner name
  std::size_t name_end = 0;  // just after the owner's inline part
  std::uint16_t type = 0;
  std::uint16_t klass = 0;
  std::uint32_t ttl = 0;  // raw
  std::size_t rdata = 0;
  std::size_t rdata_end = 0;
};

WireError read_record(std::span<const std::uint8_t> pkt, std::size_t pos, const Fence& fence,
                      Record& rr) {
  rr.start = pos;
  const WireError e = read_name(pkt, pos, pkt.size(), true, fence, nullptr, rr.name_end);
  if (e != WireError::none) return e;
  if (rr.name_end + 10 > pkt.size()) return WireError::truncated;
  rr.type = get16(pkt, rr.name_end);
  rr.klass = get16(pkt, rr.name_end + 2);
  rr.ttl = get32(pkt, rr.name_end + 4);
  rr.rdata = rr.name_end + 10;
  rr.rdata_end = rr.rdata + get16(pkt, rr.name_end + 8);
  if (rr.rdata_end > pkt.size()) return WireError::truncated;
  return WireError::none;
}

// An OPT record is owned by the root (a single zero octet) and holds well-formed options.
bool opt_ok(std::span<const std::uint8_t> pkt, const Record& rr) {
  return rr.name_end == rr.start + 1 && opt_options_ok(pkt, rr.rdata, rr.rdata_end);
}

// SVCB/HTTPS rdata (RFC 9460): priority, an uncompressed target name, then SvcParams in
// strictly increasing key order, each with a length that fits. With `addrs`, the ipv4hint
// and ipv6hint addresses are appended to it.
WireError read_svc(std::span<const std::uint8_t> pkt, std::size_t pos, std::size_t end,
                   std::vector<policy::IpAddr>* addrs) {
  if (end - pos < 2) return WireError::bad_rdata;
  std::size_t at = 0;
  if (read_name(pkt, pos + 2, end, false, Fence{}, nullptr, at) != WireError::none) {
    return WireError::bad_rdata;
  }
  long last_key = -1;
  while (at < end) {
    if (at + 4 > end) return WireError::bad_rdata;
    const std::uint16_t key = get16(pkt, at);
    const std::size_t len = get16(pkt, at + 2);
    const std::size_t value = at + 4;
    if (long{key} <= last_key || value + len > end) return WireError::bad_rdata;
    last_key = key;
    bool ok = true;
    switch (key) {
      case 0:
        ok = len != 0 && len % 2 == 0;
        break;  // mandatory: a list of keys
      case 1:
        ok = len != 0;
        break;  // alpn: at least one id
      case 2:
        ok = len == 0;
        break;  // no-default-alpn
      case 3:
        ok = len == 2;
        break;  // port
      case 4:
        ok = len != 0 && len % 4 == 0;
        break;  // ipv4hint
      case 6:
        ok = len != 0 && len % 16 == 0;
        break;  // ipv6hint
      default:
        break;
    }
    if (!ok) return WireError::bad_rdata;
    if (addrs != nullptr && (key == 4 || key == 6)) {
      const std::size_t step = key == 4 ? 4 : 16;
      for (std::size_t a = value; a < value + len; a += step) {
        policy::IpAddr ip;
        ip.v6 = key == 6;
        std::copy_n(pkt.data() + a, step, ip.bytes.begin());
        addrs->push_back(ip);
      }
    }
    at = value + len;
  }
  return WireError::none;
}

// Checks the rdata of the types whose shape is known; collects A/AAAA when `addrs` is set.
WireError check_rdata(std::span<const std::uint8_t> pkt, const Record& rr, const Fence& fence,
                      std::vector<policy::IpAddr>* addrs) {
  const std::size_t len = rr.rdata_end - rr.rdata;
  std::size_t next = 0;
  WireError e = WireError::none;
  switch (rr.type) {
    case qtype::A:
    case qtype::AAAA: {
      const std::size_t want = rr.type == qtype::A ? 4 : 16;
      if (len != want) return WireError::bad_rdata;
      if (addrs != nullptr) {
        policy::IpAddr ip;
        ip.v6 = rr.type == qtype::AAAA;
        std::copy_n(pkt.data() + rr.rdata, want, ip.bytes.begin());
        addrs->push_back(ip);
      }
      return WireError::none;
    }
    case qtype::CNAME:
    case qtype::NS:
    case qtype::PTR:
      e = read_rdata_name(pkt, rr.rdata, rr.rdata_end, true, fence, next);
      break;
    case qtype::MX:
    case qtype::SRV: {
      const std::size_t fixed = rr.type == qtype::MX ? 2 : 6;  // preference; prio, weight, port
      if (len < fixed) return WireError::bad_rdata;
      e = read_rdata_name(pkt, rr.rdata + fixed, rr.rdata_end, true, fence, next);
      break;
    }
    case qtype::SOA:
      e = read_rdata_name(pkt, rr.rdata, rr.rdata_end, true, fence, next);
      if (e == WireError::none) {
        e = read_rdata_name(pkt, next, rr.rdata_end, true, fence, next);
      }
      if (e == WireError::none && next + 20 > rr.rdata_end) return WireError::bad_rdata;
      next += 20;  // serial, refresh, retry, expire, minimum
      break;
    case qtype::SVCB:
    case qtype::HTTPS:
      return read_svc(pkt, rr.rdata, rr.rdata_end, nullptr);
    default:
      return WireError::none;
  }
  if (e != WireError::none) return e;
  return next == rr.rdata_end ? WireError::none : WireError::bad_rdata;
}

Rcode fold_rcode(std::uint16_t flags, std::uint8_t extended) {
  const unsigned low = flags & 0x000fu;
  if (extended != 0 || low > static_cast<unsigned>(Rcode::refused)) return Rcode::servfail;
  return static_cast<Rcode>(low);
}

// Collects the SVCB/HTTPS hints after every A/AAAA, as ResponseInfo documents. The records
// were validated by the first pass, and every TTL offset locates one record (OPT excluded).
void collect_hints(std::span<const std::uint8_t> pkt, ResponseInfo& info) {
  for (const std::size_t ttl_at : info.ttl_offsets) {
    const std::uint16_t type = get16(pkt, ttl_at - 4);
    if (type != qtype::SVCB && type != qtype::HTTPS) continue;
    const std::size_t rdata = ttl_at + 6;
    (void)read_svc(pkt, rdata, rdata + get16(pkt, ttl_at + 4), &info.addrs);
  }
}

}  // namespace

WireError parse_query(std::span<const std::uint8_t> pkt, Query& out) {
  out.id = 0;
  out.flags = 0;
  out.qname.len = 0;
  out.qname.labels = 0;
  out.qname.plain = true;
  out.qtype = 0;
  out.qclass = 0;
  out.question_begin = out.question_end = kHeaderSize;
  out.edns = false;
  out.edns_version = 0;
  out.udp_payload = 0;
  out.do_bit = false;

  if (pkt.size() < kHeaderSize) return WireError::short_header;
  out.id = get16(pkt, 0);
  out.flags = get16(pkt, kOffFlags);
  if ((out.flags & kFlagQR) != 0) return WireError::is_response;
  if (out.opcode() != 0) return WireError::bad_opcode;
  if (get16(pkt, kOffQd) != 1) return WireError::bad_qdcount;
  if (pkt.size() > kMaxMessage) return WireError::trailing_bytes;

  // The question name is never compressed: there is nothing before it to point at.
  std::size_t next = 0;
  WireError e = read_name(pkt, kHeaderSize, pkt.size(), false, Fence{}, &out.qname, next);
  if (e != WireError::none) return e;
  if (next + 4 > pkt.size()) return WireError::truncated;
  out.qtype = get16(pkt, next);
  out.qclass = get16(pkt, next + 2);
  out.question_end = next + 4;

  // From here on the question is known, so an error reply can echo it.
  // A query has no answers and no authority records: whatever is there is excess data.
  if (get16(pkt, kOffAn) != 0 || get16(pkt, kOffNs) != 0) return WireError::trailing_bytes;
  const std::uint16_t arcount = get16(pkt, kOffAr);
  std::size_t pos = out.question_end;
  bool seen_opt = false;
  for (std::uint16_t i = 0; i < arcount; ++i) {
    Record rr;
    e = read_record(pkt, pos, Fence{}, rr);
    if (e != WireError::none) return e;
    if (rr.type == qtype::OPT) {
      if (seen_opt || !opt_ok(pkt, rr)) return WireError::bad_opt;
      seen_opt = true;
      out.edns = true;
      out.udp_payload = rr.klass;
      out.edns_version = static_cast<std::uint8_t>(rr.ttl >> 16);
      out.do_bit = (rr.ttl & 0x8000u) != 0;
    }
    // Other additional records (TSIG, SIG(0)) are framed correctly and otherwise ignored:
    // nothing from them is forwarded.
    pos = rr.rdata_end;
  }
  if (pos != pkt.size()) return WireError::trailing_bytes;
  return WireError::none;
}

bool answers_query(std::span<const std::uint8_t> answer, std::span<const std::uint8_t> sent,
                   std::size_t question_end) {
  // A question is at least the root name (1), type and class (4).
  if (question_end < kHeaderSize + 5 || sent.size() < question_end) return false;
  if (answer.size() < question_end) return false;
  if (get16(answer, 0) != get16(sent, 0)) return false;
  if ((get16(answer, kOffFlags) & kFlagQR) == 0 || get16(answer, kOffQd) != 1) return false;
  // A label length is at most 63, below 'A': folding letters never changes one.
  const auto fold = [](std::uint8_t c) {
    return static_cast<std::uint8_t>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
  };
  const std::size_t name_end = question_end - 4;
  for (std::size_t i = kHeaderSize; i < name_end; ++i) {
    if (fold(answer[i]) != fold(sent[i])) return false;
  }
  return std::equal(answer.begin() + static_cast<std::ptrdiff_t>(name_end),
                    answer.begin() + static_cast<std::ptrdiff_t>(question_end),
                    sent.begin() + static_cast<std::ptrdiff_t>(name_end));
}

WireError parse_response(std::span<const std::uint8_t> pkt, const Query& q, ResponseInfo& info) {
  info.rcode = Rcode::noerror;
  info.tc = false;
  info.negative = false;
  info.addrs.clear();
  info.ttl = 0;
  info.ttl_offsets.clear();
  info.opt_offset = 0;
  info.opt_len = 0;
  info.question_end = 0;

  if (pkt.size() < kHeaderSize) return WireError::short_header;
  // TTL offsets are 16-bit: nothing larger is a DNS message anyway.
  if (pkt.size() > kMaxMessage) return WireError::trailing_bytes;
  const std::uint16_t flags = get16(pkt, kOffFlags);
  // A message without QR is not an answer to anything we asked.
  if ((flags & kFlagQR) == 0) return WireError::question_mismatch;
  if (((flags >> 11) & 0xf) != 0) return WireError::bad_opcode;
  if (get16(pkt, kOffQd) != 1) return WireError::bad_qdcount;

  Name qname;
  std::size_t next = 0;
  WireError e = read_name(pkt, kHeaderSize, pkt.size(), true, Fence{}, &qname, next);
  if (e != WireError::none) return e;
  if (next + 4 > pkt.size()) return WireError::truncated;
  // Both texts are lower-cased with the same escapes, so equal texts mean equal names.
  if (qname.view() != q.qname.view() || get16(pkt, next) != q.qtype ||
      get16(pkt, next + 2) != q.qclass) {
    return WireError::question_mismatch;
  }
  info.question_end = next + 4;

  const std::uint16_t counts[3] = {get16(pkt, kOffAn), get16(pkt, kOffNs), get16(pkt, kOffAr)};
  std::size_t pos = info.question_end;
  std::size_t opt_start = std::numeric_limits<std::size_t>::max();
  // Rebuilt for every use: pushing a TTL offset may move the vector.
  const auto fence = [&] { return Fence{opt_start, info.ttl_offsets}; };
  std::uint32_t min_ttl = std::numeric_limits<std::uint32_t>::max();
  bool any_ttl = false, has_data = false, has_cname = false, has_soa = false, has_svc = false;
  std::uint32_t soa_ttl = 0;
  std::uint8_t ext_rcode = 0;
  for (int section = 0; section < 3; ++section) {
    for (std::uint16_t i = 0; i < counts[section]; ++i) {
      Record rr;
      e = read_record(pkt, pos, fence(), rr);
      if (e != WireError::none) return e;
      pos = rr.rdata_end;
      if (rr.type == qtype::OPT) {
        if (section != 2 || info.opt_len != 0 || !opt_ok(pkt, rr)) return WireError::bad_opt;
        ext_rcode = static_cast<std::uint8_t>(rr.ttl >> 24);
        info.opt_offset = rr.start;
        info.opt_len = rr.rdata_end - rr.start;
        opt_start = rr.start;
        continue;
      }
      info.ttl_offsets.push_back(static_cast<std::uint16_t>(rr.name_end + 4));
      const std::uint32_t ttl = sane_ttl(rr.ttl);
      e = check_rdata(pkt, rr, fence(), &info.addrs);  // every section reaches the client
      if (e != WireError::none) return e;
      has_svc = has_svc || rr.type == qtype::SVCB || rr.type == qtype::HTTPS;
      if (section == 2) continue;
      min_ttl = std::min(min_ttl, ttl);
      any_ttl = true;
      if (section == 0) {
        has_data = has_data || rr.type == q.qtype;
        if (rr.type == qtype::CNAME && !has_cname) {
          Name owner;
          (void)read_name(pkt, rr.start, pkt.size(), true, fence(), &owner, next);
          has_cname = owner.view() == q.qname.view();
        }
      } else if (rr.type == qtype::SOA && !has_soa) {
        has_soa = true;
        soa_ttl = std::min(ttl, sane_ttl(get32(pkt, rr.rdata_end - 4)));  // RFC 2308 5
      }
    }
  }
  if (pos != pkt.size()) return WireError::trailing_bytes;

  info.rcode = fold_rcode(flags, ext_rcode);
  info.tc = (flags & kFlagTC) != 0;
  info.negative =
      info.rcode == Rcode::nxdomain || (info.rcode == Rcode::noerror && !has_data && !has_cname);
  if (info.negative) {
    info.ttl = has_soa ? soa_ttl : 0;
  } else {
    info.ttl = any_ttl ? min_ttl : 0;
  }
  if (has_svc) collect_hints(pkt, info);
  return WireError::none;
}

}  // namespace vibepit::dns
