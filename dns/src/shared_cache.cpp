#include "shared_cache.hpp"

#include <algorithm>
#include <functional>
#include <string_view>

namespace vibepit::dns {

SharedCache::SharedCache(CacheLimits total, std::size_t shards) : enabled_(total.entries > 0) {
  shards = std::max<std::size_t>(1, std::min(shards, std::max<std::size_t>(1, total.entries)));
  CacheLimits each = total;
  each.entries = std::max<std::size_t>(1, total.entries / shards);
  each.bytes = std::max(total.max_entry_bytes, total.bytes / shards);
  for (std::size_t i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>(each));
}

SharedCache::Shard& SharedCache::shard_for(const Query& q) {
  return *shards_[std::hash<std::string_view>{}(q.qname.view()) % shards_.size()];
}

void SharedCache::insert(const Query& q, std::span<const std::uint8_t> upstream,
                         const ResponseInfo& info, Cache::clock::time_point now) {
  if (!enabled_) return;
  auto& s = shard_for(q);
  std::lock_guard lock(s.mu);
  s.cache.insert(q, upstream, info, now);
}

SharedCache::Hit SharedCache::lookup(std::span<const std::uint8_t> pkt, const Query& q,
                                     Cache::clock::time_point now, std::size_t limit,
                                     std::uint16_t our_payload, std::span<std::uint8_t> out,
                                     std::vector<policy::IpAddr>& addrs) {
  addrs.clear();
  if (!enabled_) return {};
  auto& s = shard_for(q);
  std::lock_guard lock(s.mu);
  auto hit = s.cache.lookup(pkt, q, now, limit, our_payload, out);
  if (hit.size == 0) return {};
  addrs.assign(hit.addrs.begin(), hit.addrs.end());  // the entry may go once we unlock
  return {hit.size, hit.rcode};
}

}  // namespace vibepit::dns
