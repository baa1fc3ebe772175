// The per-thread answer cache. Entries keep the upstream answer with its OPT cut out and its
// TTLs clamped, so a hit is one copy plus a few patches into the caller's buffer.
#include "vibepit/dns/cache.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "wire_detail.hpp"

namespace vibepit::dns {

using namespace detail;

struct Cache::Entry {
  std::string key;                         // the map's key views this string: list nodes never move
  std::vector<std::uint8_t> msg;           // header, upstream question, records; no OPT
  std::vector<std::uint16_t> ttl_offsets;  // into msg
  std::vector<policy::IpAddr> addrs;
  std::uint16_t question_len = 0;
  Rcode rcode = Rcode::noerror;
  clock::time_point stored;
  clock::time_point expires;
};

namespace {
// The floor wins over nothing: a ceiling below the floor caps it.
std::uint32_t clamp_ttl(std::uint32_t ttl, std::uint32_t lo, std::uint32_t hi) {
  return std::min(std::max(ttl, lo), hi);
}
}  // namespace

std::size_t Cache::KeyHash::operator()(std::string_view k) const noexcept {
  return std::hash<std::string_view>{}(k);
}

Cache::Cache(CacheLimits limits) : limits_(limits) {}
Cache::~Cache() = default;

std::string_view Cache::make_key(const Query& q, std::array<char, kMaxNameText + 8>& buf) {
  const std::string_view name = q.qname.view();
  std::memcpy(buf.data(), name.data(), name.size());
  std::size_t at = name.size();
  buf[at++] = static_cast<char>(q.qtype >> 8);
  buf[at++] = static_cast<char>(q.qtype);
  buf[at++] = static_cast<char>(q.qclass >> 8);
  buf[at++] = static_cast<char>(q.qclass);
  buf[at++] = q.do_bit ? 1 : 0;
  return {buf.data(), at};
}

void Cache::insert(const Query& q, std::span<const std::uint8_t> upstream, const ResponseInfo& info,
                   clock::time_point now) {
  if (limits_.entries == 0 || info.tc) return;
  if (info.rcode != Rcode::noerror && info.rcode != Rcode::nxdomain) return;
  const std::uint32_t ceiling = info.negative ? limits_.max_negative_ttl : limits_.max_ttl;
  const std::uint32_t lifetime = clamp_ttl(info.ttl, limits_.min_ttl, ceiling);
  if (lifetime == 0) return;

  // The answer must be one parse_response() accepted for a question shaped like this one.
  const std::size_t qlen = q.question_end - q.question_begin;
  if (q.question_end <= q.question_begin || upstream.size() > kMaxMessage ||
      info.question_end != kHeaderSize + qlen || info.question_end > upstream.size()) {
    return;
  }
  const std::size_t opt_end = info.opt_offset + info.opt_len;
  if (info.opt_len != 0 && (info.opt_offset < info.question_end || opt_end > upstream.size() ||
                            get16(upstream, kOffAr) == 0)) {
    return;
  }
  const std::size_t size = upstream.size() - info.opt_len;
  if (size > limits_.max_entry_bytes || size > limits_.bytes) return;

  std::array<char, kMaxNameText + 8> buf;
  const std::string_view key = make_key(q, buf);
  if (auto it = map_.find(key); it != map_.end()) erase(it->second);

  Entry e;
  e.key.assign(key);
  e.msg.resize(size);
  std::span<std::uint8_t> msg(e.msg);
  if (info.opt_len == 0) {
    std::memcpy(msg.data(), upstream.data(), size);
  } else {
    std::memcpy(msg.data(), upstream.data(), info.opt_offset);
    std::memcpy(msg.data() + info.opt_offset, upstream.data() + opt_end, upstream.size() - opt_end);
    put16(msg, kOffAr, static_cast<std::uint16_t>(get16(msg, kOffAr) - 1));
  }
  e.ttl_offsets.reserve(info.ttl_offsets.size());
  for (std::uint16_t off : info.ttl_offsets) {
    std::size_t at = off;
    if (info.opt_len != 0 && at > info.opt_offset) at -= info.opt_len;
    if (at + 4 > size) return;  // not offsets of this answer
    put32(msg, at, clamp_ttl(sane_ttl(get32(msg, at)), limits_.min_ttl, ceiling));
    e.ttl_offsets.push_back(static_cast<std::uint16_t>(at));
  }
  e.addrs = info.addrs;
  e.question_len = static_cast<std::uint16_t>(qlen);
  e.rcode = info.rcode;
  e.stored = now;
  e.expires = now + std::chrono::seconds(lifetime);

  lru_.push_front(std::move(e));
  map_.emplace(std::string_view(lru_.front().key), lru_.begin());
  bytes_ += size;
  while (map_.size() > limits_.entries || bytes_ > limits_.bytes) evict_one();
}

Cache::Hit Cache::lookup(std::span<const std::uint8_t> pkt, const Query& q, clock::time_point now,
                         std::size_t limit, std::uint16_t our_payload,
                         std::span<std::uint8_t> out) {
  std::array<char, kMaxNameText + 8> buf;
  const auto it = map_.find(make_key(q, buf));
  if (it == map_.end()) {
    ++misses_;
    return {};
  }
  const Entry& e = *it->second;
  if (now >= e.expires) {
    erase(it->second);
    ++misses_;
    return {};
  }
  // Query names are never compressed, so the same name always has the same length; a
  // different length means the entry cannot carry this client's question.
  if (q.question_end - q.question_begin != e.question_len) {
    ++misses_;
    return {};
  }
  const std::span<const std::uint8_t> msg(e.msg);
  ReplyParts parts;
  parts.flags = reply_flags(get16(msg, kOffFlags), q, e.rcode);
  parts.ancount = get16(msg, kOffAn);
  parts.nscount = get16(msg, kOffNs);
  parts.arcount = get16(msg, kOffAr);
  parts.records1 = msg.subspan(kHeaderSize + e.question_len);
  const Assembled reply = assemble_reply(parts, pkt, q, limit, our_payload, out);
  if (reply.size == 0) {
    ++misses_;
    return {};
  }
  if (!reply.truncated) {
    // The reply has the stored layout, so the stored offsets locate its TTLs.
    const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - e.stored).count();
    const auto spent = static_cast<std::uint32_t>(std::max<decltype(elapsed)>(
        0, std::min<decltype(elapsed)>(elapsed, std::numeric_limits<std::uint32_t>::max())));
    for (std::uint16_t off : e.ttl_offsets) {
      const std::uint32_t ttl = get32(msg, off);
      put32(out, off, ttl > spent ? ttl - spent : 0);
    }
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return {reply.size, e.rcode, e.addrs};
}

void Cache::evict_one() {
  if (lru_.empty()) return;
  erase(std::prev(lru_.end()));
  ++evictions_;
}

void Cache::erase(std::list<Entry>::iterator it) {
  map_.erase(std::string_view(it->key));
  bytes_ -= it->msg.size();
  lru_.erase(it);
}

}  // namespace vibepit::dns
