// libFuzzer target: the rebinding defence fed with upstream responses. The input is an
// upstream's answer to a fixed query. Whatever parse_response accepts goes to check_answer,
// and a walker written here, independent of the parser, finds every A and AAAA record of
// every section. The defence must refuse the answer exactly when one of those addresses is
// blocked: an address the parser misses (as the authority section once was) fails here.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "vibepit/dns/filter.hpp"
#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace {

using namespace vibepit;
using Bytes = std::vector<std::uint8_t>;

// www.example.com A, no EDNS.
const Bytes kQuery = {0x12, 0x34, 0x01, 0x00, 0,   1,   0,   0,   0,   0,   0,
                      0,    3,    'w',  'w',  'w', 7,   'e', 'x', 'a', 'm', 'p',
                      'l',  'e',  3,    'c',  'o', 'm', 0,   0,   1,   0,   1};

const dns::Query& query() {
  static const dns::Query q = [] {
    dns::Query out;
    CHECK(dns::parse_query(kQuery, out) == dns::WireError::none);
    return out;
  }();
  return q;
}

const policy::Snapshot& snapshot() {
  static const std::shared_ptr<const policy::Snapshot> snap = [] {
    policy::RuleSet r;
    r.allow_dns = {"www.example.com"};
    r.block_cidr = {"198.51.100.128/25", "2001:db8:bad::/48"};
    auto compiled = policy::compile(r, 1);
    return std::get<std::shared_ptr<const policy::Snapshot>>(compiled);
  }();
  return *snap;
}

std::uint16_t get16(std::span<const std::uint8_t> p, std::size_t at) {
  return static_cast<std::uint16_t>(p[at] << 8 | p[at + 1]);
}

// Skips a name at `at` (labels, ending in a root label or a pointer). False when it runs
// off the message.
bool skip_name(std::span<const std::uint8_t> p, std::size_t& at) {
  while (at < p.size()) {
    const std::uint8_t len = p[at];
    if (len == 0) {
      ++at;
      return true;
    }
    if ((len & 0xc0) == 0xc0) {
      at += 2;
      return at <= p.size();
    }
    at += 1 + len;
  }
  return false;
}

// Every A (4-octet) and AAAA (16-octet) record in every section, by a plain walk.
bool walk_addresses(std::span<const std::uint8_t> p, std::vector<policy::IpAddr>& out) {
  if (p.size() < 12) return false;
  const std::size_t qd = get16(p, 4);
  const std::size_t rrs = std::size_t{get16(p, 6)} + get16(p, 8) + get16(p, 10);
  std::size_t at = 12;
  for (std::size_t i = 0; i < qd; ++i) {
    if (!skip_name(p, at) || at + 4 > p.size()) return false;
    at += 4;
  }
  for (std::size_t i = 0; i < rrs; ++i) {
    if (!skip_name(p, at) || at + 10 > p.size()) return false;
    const std::uint16_t type = get16(p, at), cls = get16(p, at + 2);
    const std::size_t rdlen = get16(p, at + 8);
    at += 10;
    if (at + rdlen > p.size()) return false;
    const bool a = type == dns::qtype::A && rdlen == 4,
               aaaa = type == dns::qtype::AAAA && rdlen == 16;
    if ((a || aaaa) && cls == 1) {
      policy::IpAddr ip;
      ip.v6 = aaaa;
      for (std::size_t k = 0; k < rdlen; ++k) ip.bytes[k] = p[at + k];
      out.push_back(ip);
    }
    at += rdlen;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  dns::ResponseInfo info;
  if (dns::parse_response(in, query(), info) != dns::WireError::none) return 0;
  const policy::Snapshot& snap = snapshot();
  const dns::AnswerVerdict verdict = dns::check_answer(info.addrs, snap);

  std::vector<policy::IpAddr> walked;
  CHECK(walk_addresses(in, walked));  // what the strict parser accepts, the walker can read
  bool any_blocked = false;
  for (const auto& ip : walked) {
    // Each is among what the defence judged, and a blocked one refuses the answer.
    CHECK(std::find(info.addrs.begin(), info.addrs.end(), ip) != info.addrs.end());
    any_blocked = any_blocked || snap.classifier.classify(ip).blocked;
  }
  if (any_blocked) CHECK(!verdict.allowed);
  if (!verdict.allowed) {
    CHECK(snap.classifier.classify(verdict.addr).blocked);
    CHECK(!verdict.range.empty());
  }
  return 0;
}
