// The address classifier. It runs for every resolved address, so the tables are small,
// fixed and scanned with masks, and nothing is allocated for an address that is allowed
// (the embedded IPv4 text fits in the small-string buffer).
#include "vibepit/policy/classify.hpp"

#include <array>
#include <cstring>

#include "ip_detail.hpp"

namespace vibepit::policy {
namespace {

struct V4Special {
  std::uint32_t base;
  std::uint32_t mask;
  std::string_view text;
  std::string_view kind;
  bool always;  // no setting can unblock it
};

// Always-blocked ranges first, so that a verdict names the strongest reason.
constexpr V4Special kV4[] = {
    {0x0A000000, 0xFF000000, "10.0.0.0/8", "private", true},
    {0xAC100000, 0xFFF00000, "172.16.0.0/12", "private", true},
    {0xC0A80000, 0xFFFF0000, "192.168.0.0/16", "private", true},
    {0x7F000000, 0xFF000000, "127.0.0.0/8", "loopback", true},
    {0xA9FE0000, 0xFFFF0000, "169.254.0.0/16", "link-local", true},
    {0x00000000, 0xFF000000, "0.0.0.0/8", "unspecified", false},
    {0x64400000, 0xFFC00000, "100.64.0.0/10", "shared-address", false},
    {0xC0000000, 0xFFFFFF00, "192.0.0.0/24", "ietf-protocol", false},
    {0xC6120000, 0xFFFE0000, "198.18.0.0/15", "benchmarking", false},
    {0xE0000000, 0xF0000000, "224.0.0.0/4", "multicast", false},
    {0xF0000000, 0xF0000000, "240.0.0.0/4", "reserved", false},  // incl. 255.255.255.255
    // Azure's host endpoint (DHCP, DNS, health, the guest agent's wire server): a public
    // address that reaches the machine's own host, as the metadata address does elsewhere.
    {0xA83F8110, 0xFFFFFFFF, "168.63.129.16/32", "cloud-host", false},
};

struct V6Special {
  std::array<std::uint8_t, 16> base;
  int prefix;
  std::string_view text;
  std::string_view kind;
  bool always;
};

constexpr V6Special kV6[] = {
    {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128, "::1/128", "loopback", true},
    {{0xfc}, 7, "fc00::/7", "unique-local", true},
    {{0xfe, 0x80}, 10, "fe80::/10", "link-local", true},
    {{}, 128, "::/128", "unspecified", false},
    {{0xfe, 0xc0}, 10, "fec0::/10", "site-local", false},  // deprecated (RFC 3879)
    {{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, 96, "::ffff:0:0:0/96", "siit", false},
    {{0x01}, 64, "100::/64", "discard", false},
    {{0xff}, 8, "ff00::/8", "multicast", false},
};

std::uint32_t load_v4(const std::uint8_t* b) {
  return static_cast<std::uint32_t>(b[0]) << 24 | static_cast<std::uint32_t>(b[1]) << 16 |
         static_cast<std::uint32_t>(b[2]) << 8 | static_cast<std::uint32_t>(b[3]);
}

std::vector<Cidr> build_ranges(bool always) {
  std::vector<Cidr> out;
  for (const auto& r : kV4) {
    if (r.always == always) out.push_back(*Cidr::parse(r.text));
  }
  for (const auto& r : kV6) {
    if (r.always == always) out.push_back(*Cidr::parse(r.text));
  }
  return out;
}

bool all_zero(const std::uint8_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

// The IPv4 addresses embedded in an IPv6 address, in the order they are judged.
// Returns how many there are (0, 1, or 2 for Teredo: client then server).
int embedded_v4(const std::array<std::uint8_t, 16>& b, std::uint32_t out[2]) {
  static constexpr std::uint8_t kNat64[12] = {0x00, 0x64, 0xff, 0x9b};
  if (all_zero(b.data(), 10) && b[10] == 0xff && b[11] == 0xff) {  // ::ffff:0:0/96 mapped
    out[0] = load_v4(&b[12]);
    return 1;
  }
  if (all_zero(b.data(), 12)) {  // ::/96 compatible (:: and ::1 are judged as IPv6 first)
    out[0] = load_v4(&b[12]);
    return 1;
  }
  if (std::memcmp(b.data(), kNat64, 12) == 0) {  // 64:ff9b::/96 NAT64
    out[0] = load_v4(&b[12]);
    return 1;
  }
  // 64:ff9b:1::/48 local-use NAT64 (RFC 8215) in its /96 layout; the other RFC 6052 layouts
  // are refused whole before this (kLocalNat64).
  static constexpr std::uint8_t kLocalNat64[12] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
  if (std::memcmp(b.data(), kLocalNat64, 12) == 0) {
    out[0] = load_v4(&b[12]);
    return 1;
  }
  if (b[0] == 0x20 && b[1] == 0x02) {  // 2002::/16 6to4
    out[0] = load_v4(&b[2]);
    return 1;
  }
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) {  // 2001::/32 Teredo
    out[0] = load_v4(&b[12]) ^ 0xffffffffu;                      // client, obfuscated
    out[1] = load_v4(&b[4]);                                     // server
    return 2;
  }
  return 0;
}

void set_embedded(Classification& out, std::uint32_t v4) {
  std::uint8_t b[4] = {static_cast<std::uint8_t>(v4 >> 24), static_cast<std::uint8_t>(v4 >> 16),
                       static_cast<std::uint8_t>(v4 >> 8), static_cast<std::uint8_t>(v4)};
  out.embedded.clear();
  detail::append_v4(out.embedded, b);
}

}  // namespace

const std::vector<Cidr>& always_blocked_ranges() {
  static const std::vector<Cidr> ranges = build_ranges(true);
  return ranges;
}

const std::vector<Cidr>& default_blocked_ranges() {
  static const std::vector<Cidr> ranges = build_ranges(false);
  return ranges;
}

Classification classify_always_blocked(const IpAddr& addr) {
  static const Classifier none;
  return none.classify_impl(addr, true);
}

Classifier::Classifier(std::vector<Cidr> extra_blocked) : extra_(std::move(extra_blocked)) {
  for (std::size_t i = 0; i < extra_.size(); ++i) {
    const Cidr& c = extra_[i];
    if (c.base.v6) {
      extra_v6_.push_back(i);
      continue;
    }
    std::uint32_t mask = c.prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - c.prefix);
    extra_v4_.push_back({load_v4(c.base.bytes.data()) & mask, mask, i});
  }
}

Classification Classifier::classify(const IpAddr& addr) const {
  return classify_impl(addr, false);
}

bool Classifier::judge_v4(std::uint32_t addr, bool always_only, Classification& out) const {
  for (const auto& r : kV4) {
    if ((addr & r.mask) == r.base && (r.always || !always_only)) {
      out.blocked = true;
      out.range = r.text;
      out.kind = r.kind;
      return true;
    }
  }
  if (always_only) return false;
  for (const auto& r : extra_v4_) {
    if ((addr & r.mask) == r.base) {
      out.blocked = true;
      out.range = extra_[r.index].to_string();
      out.kind = "block-cidr";
      return true;
    }
  }
  return false;
}

Classification Classifier::classify_impl(const IpAddr& addr, bool always_only) const {
  Classification out;
  if (!addr.v6) {
    judge_v4(load_v4(addr.bytes.data()), always_only, out);
    return out;
  }
  for (const auto& r : kV6) {
    // The first byte rejects most rows before the full prefix compare.
    auto first_mask = static_cast<std::uint8_t>(r.prefix >= 8 ? 0xff : 0xff << (8 - r.prefix));
    if ((addr.bytes[0] & first_mask) != r.base[0]) continue;
    if ((r.always || !always_only) &&
        detail::prefix_equal(addr.bytes.data(), r.base.data(), r.prefix)) {
      out.blocked = true;
      out.range = r.text;
      out.kind = r.kind;
      return out;
    }
  }
  // Local-use NAT64 with a layout other than /96 (RFC 6052 /48, /56, /64): where the IPv4
  // address sits depends on the operator's prefix length, so no one reading is safe.
  static constexpr std::uint8_t kLocalNat64Prefix[6] = {0x00, 0x64, 0xff, 0x9b, 0x00, 0x01};
  if (!always_only && std::memcmp(addr.bytes.data(), kLocalNat64Prefix, 6) == 0 &&
      !all_zero(addr.bytes.data() + 6, 6)) {
    out.blocked = true;
    out.range = "64:ff9b:1::/48";
    out.kind = "nat64-local";
    return out;
  }
  bool is_unspecified_or_loopback = all_zero(addr.bytes.data(), 15) && addr.bytes[15] <= 1;
  std::uint32_t v4[2];
  int n = is_unspecified_or_loopback ? 0 : embedded_v4(addr.bytes, v4);
  for (int i = 0; i < n; ++i) {
    if (judge_v4(v4[i], always_only, out)) {
      set_embedded(out, v4[i]);
      return out;
    }
  }
  if (n > 0) set_embedded(out, v4[0]);
  if (always_only) return out;
  for (std::size_t i : extra_v6_) {
    if (extra_[i].contains(addr)) {
      out.blocked = true;
      out.range = extra_[i].to_string();
      out.kind = "block-cidr";
      return out;
    }
  }
  return out;
}

}  // namespace vibepit::policy
