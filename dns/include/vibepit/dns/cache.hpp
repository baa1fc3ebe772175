#pragma once
// The DNS answer cache. One per I/O thread, so it takes no lock. Entries are upstream
// answers in wire form (OPT removed), keyed by (qname, qtype, qclass, DO bit), positive and
// negative alike. A hit copies the stored bytes into the caller's buffer and patches the ID,
// the client's question bytes and every TTL (decremented by the time spent in the cache):
// no allocation on that path. Bounded by entry count and by bytes, least recently used out.
//
// The cache sits behind the policy check: a query is judged against the current rules
// before the cache is consulted, and the server re-classifies a hit's addresses.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "vibepit/dns/wire.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::dns {

struct CacheLimits {
  std::size_t entries = 10'000;
  std::size_t bytes = 32u << 20;           // stored message bytes across all entries
  std::size_t max_entry_bytes = 4096;      // larger answers are not cached
  std::uint32_t min_ttl = 0;               // floor for every stored TTL (seconds)
  std::uint32_t max_ttl = 86'400;          // ceiling for positive answers
  std::uint32_t max_negative_ttl = 3'600;  // ceiling for NXDOMAIN / NODATA
};

class Cache {
 public:
  using clock = std::chrono::steady_clock;

  explicit Cache(CacheLimits limits = {});
  ~Cache();  // out of line: Entry is complete only in cache.cpp
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;

  // Store an upstream answer to `q`. `upstream` and `info` are as parse_response() left
  // them. Answers with TC set, with rcode other than NOERROR/NXDOMAIN, or with a lifetime of
  // 0 after the floor are not stored. Replaces an existing entry for the same key.
  void insert(const Query& q, std::span<const std::uint8_t> upstream, const ResponseInfo& info,
              clock::time_point now);

  struct Hit {
    std::size_t size = 0;                   // bytes written to `out`; 0 on a miss
    Rcode rcode = Rcode::noerror;           // of the stored answer
    std::span<const policy::IpAddr> addrs;  // as in ResponseInfo::addrs; valid until the
                                            // next call on this cache
  };
  // Look `q` up. On a hit, write the client's reply into `out` (the same shape
  // build_reply_from_upstream() gives: client ID and question bytes, OPT when the client
  // sent one, TC and no records past `limit`). Expired entries are removed and miss.
  Hit lookup(std::span<const std::uint8_t> pkt, const Query& q, clock::time_point now,
             std::size_t limit, std::uint16_t our_payload, std::span<std::uint8_t> out);

  std::size_t size() const { return map_.size(); }
  std::size_t bytes() const { return bytes_; }
  std::uint64_t hits() const { return hits_; }
  std::uint64_t misses() const { return misses_; }
  std::uint64_t evictions() const { return evictions_; }

 private:
  struct Entry;
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const noexcept;
  };
  struct KeyEq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
  };
  // Key: qname text, then qtype, qclass and DO packed into 5 bytes; built in a fixed buffer.
  static std::string_view make_key(const Query& q, std::array<char, kMaxNameText + 8>& buf);
  void evict_one();
  void erase(std::list<Entry>::iterator it);

  CacheLimits limits_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string_view, std::list<Entry>::iterator, KeyHash, KeyEq> map_;
  std::size_t bytes_ = 0;
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace vibepit::dns
