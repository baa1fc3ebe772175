#pragma once
// A tiny DNS message builder for tests: packets are written field by field, so each test
// shows the shape it feeds in, and malformed shapes are as easy to write as good ones.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::dns::test {

using Bytes = std::vector<std::uint8_t>;

class Msg {
 public:
  Msg& u8(std::uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Msg& u16(std::uint16_t v) { return u8(static_cast<std::uint8_t>(v >> 8)).u8(v & 0xff); }
  Msg& u32(std::uint32_t v) { return u16(static_cast<std::uint16_t>(v >> 16)).u16(v & 0xffff); }
  Msg& raw(std::span<const std::uint8_t> bytes) {
    b.insert(b.end(), bytes.begin(), bytes.end());
    return *this;
  }
  Msg& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Msg& header(std::uint16_t id, std::uint16_t flags, std::uint16_t qd, std::uint16_t an,
              std::uint16_t ns, std::uint16_t ar) {
    return u16(id).u16(flags).u16(qd).u16(an).u16(ns).u16(ar);
  }
  // One label with any octets, length included.
  Msg& label(std::string_view octets) {
    return u8(static_cast<std::uint8_t>(octets.size())).raw(octets);
  }
  // Dotted text ("www.example.com"; "" or "." is the root), uncompressed, with the root.
  Msg& name(std::string_view dotted) {
    labels(dotted);
    return u8(0);
  }
  // Labels of dotted text without the terminating root, to be followed by ptr().
  Msg& labels(std::string_view dotted) {
    if (dotted == ".") dotted = {};
    while (!dotted.empty()) {
      const auto dot = dotted.find('.');
      label(dotted.substr(0, dot));
      dotted = dot == std::string_view::npos ? std::string_view{} : dotted.substr(dot + 1);
    }
    return *this;
  }
  Msg& ptr(std::uint16_t offset) { return u16(static_cast<std::uint16_t>(0xc000 | offset)); }
  Msg& question(std::string_view dotted, std::uint16_t type, std::uint16_t klass = kClassIN) {
    return name(dotted).u16(type).u16(klass);
  }
  // The fields after an owner name: type, class, TTL, RDLENGTH and the rdata.
  Msg& rr_tail(std::uint16_t type, std::uint32_t ttl, std::span<const std::uint8_t> rdata,
               std::uint16_t klass = kClassIN) {
    return u16(type).u16(klass).u32(ttl).u16(static_cast<std::uint16_t>(rdata.size())).raw(rdata);
  }
  Msg& rr(std::string_view owner, std::uint16_t type, std::uint32_t ttl,
          std::span<const std::uint8_t> rdata) {
    return name(owner).rr_tail(type, ttl, rdata);
  }
  // A record whose owner is a compression pointer.
  Msg& rr_at(std::uint16_t owner, std::uint16_t type, std::uint32_t ttl,
             std::span<const std::uint8_t> rdata) {
    return ptr(owner).rr_tail(type, ttl, rdata);
  }
  // An OPT record: class = payload; TTL = ext-rcode, version, DO.
  Msg& opt(std::uint16_t payload, std::uint32_t ttl = 0, std::span<const std::uint8_t> rdata = {}) {
    return u8(0).rr_tail(qtype::OPT, ttl, rdata, payload);
  }
  Msg& set16(std::size_t at, std::uint16_t v) {
    b[at] = static_cast<std::uint8_t>(v >> 8);
    b[at + 1] = static_cast<std::uint8_t>(v);
    return *this;
  }
  std::uint16_t here() const { return static_cast<std::uint16_t>(b.size()); }
  std::span<const std::uint8_t> span() const { return b; }

  Bytes b;
};

inline std::uint16_t get16(std::span<const std::uint8_t> p, std::size_t at) {
  return static_cast<std::uint16_t>((p[at] << 8) | p[at + 1]);
}
inline std::uint32_t get32(std::span<const std::uint8_t> p, std::size_t at) {
  return (std::uint32_t{get16(p, at)} << 16) | get16(p, at + 2);
}

inline policy::IpAddr ip(std::string_view text) {
  return *policy::IpAddr::parse(text);
}

// Rdata of an A or AAAA record.
inline Bytes addr_rdata(std::string_view text) {
  const policy::IpAddr a = ip(text);
  return Bytes(a.bytes.begin(), a.bytes.begin() + (a.v6 ? 16 : 4));
}
inline Bytes name_rdata(std::string_view dotted) {
  return Msg().name(dotted).b;
}
inline Bytes soa_rdata(std::uint32_t minimum) {
  return Msg()
      .name("ns.example.com")
      .name("admin.example.com")
      .u32(1)
      .u32(2)
      .u32(3)
      .u32(4)
      .u32(minimum)
      .b;
}
// SVCB/HTTPS rdata: priority, target, and (key, value) params written as given.
inline Bytes svc_rdata(std::uint16_t priority, std::string_view target,
                       std::initializer_list<std::pair<std::uint16_t, Bytes>> params) {
  Msg m;
  m.u16(priority).name(target);
  for (const auto& [key, value] : params) {
    m.u16(key).u16(static_cast<std::uint16_t>(value.size())).raw(value);
  }
  return m.b;
}
inline Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

struct QuerySpec {
  std::string_view name = "www.example.com";
  std::uint16_t type = qtype::A;
  std::uint16_t id = 0x1234;
  std::uint16_t flags = kFlagRD;
  bool edns = false;
  std::uint16_t payload = 1232;
  bool do_bit = false;
};

// A well-formed query, optionally with an OPT.
inline Bytes make_query(const QuerySpec& s) {
  Msg m;
  m.header(s.id, s.flags, 1, 0, 0, s.edns ? 1 : 0).question(s.name, s.type);
  if (s.edns) m.opt(s.payload, s.do_bit ? 0x8000u : 0u);
  return m.b;
}

// A response to `s` from upstream: header (ID 0, QR RD RA + rcode), the question in lower
// case, then the caller adds records and sets the counts.
inline Msg response_to(const QuerySpec& s, std::uint16_t an, std::uint16_t ns, std::uint16_t ar,
                       std::uint16_t rcode = 0, std::uint16_t extra_flags = 0) {
  std::string lower(s.name);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  Msg m;
  m.header(0, static_cast<std::uint16_t>(kFlagQR | kFlagRD | kFlagRA | extra_flags | rcode), 1, an,
           ns, ar)
      .question(lower, s.type);
  return m;
}

}  // namespace vibepit::dns::test
