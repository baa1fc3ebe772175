#pragma once
// The answer cache shared by every I/O thread. A query's UDP socket is picked by the kernel
// (SO_REUSEPORT hashes the client's address and port), so per-thread caches would miss
// whenever a client's next query lands on another thread. The cache is split into shards by
// name, each behind its own mutex: two threads meet only when they touch the same shard at
// the same moment, and a hit still allocates nothing.
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "vibepit/dns/cache.hpp"

namespace vibepit::dns {

class SharedCache {
 public:
  explicit SharedCache(CacheLimits total, std::size_t shards = 16);

  void insert(const Query& q, std::span<const std::uint8_t> upstream, const ResponseInfo& info,
              Cache::clock::time_point now);

  struct Hit {
    std::size_t size = 0;  // 0 on a miss
    Rcode rcode = Rcode::noerror;
  };
  // As Cache::lookup; the hit's addresses are copied into `addrs` (its capacity is reused).
  Hit lookup(std::span<const std::uint8_t> pkt, const Query& q, Cache::clock::time_point now,
             std::size_t limit, std::uint16_t our_payload, std::span<std::uint8_t> out,
             std::vector<policy::IpAddr>& addrs);

 private:
  struct alignas(64) Shard {
    explicit Shard(CacheLimits l) : cache(l) {}
    std::mutex mu;
    Cache cache;
  };
  Shard& shard_for(const Query& q);

  bool enabled_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace vibepit::dns
