#pragma once
// Containers that a copy shares with its original, for rule snapshots, which are copied
// for every rule added at runtime. Copying one costs a fixed number of reference counts
// (not a walk of its entries), and a change copies only the part it touches: adding one
// rule to a snapshot of 100 000 costs a few hundred entries copied, not 100 000.
//
// A part is copied before it is changed unless this container is its only owner
// (use_count() == 1). That test is sound because of how snapshots are used: a snapshot
// is changed only while it is being built, before it is published; parts it shares with
// a published snapshot are counted by that snapshot too; and a published snapshot is never
// changed, only copied (SnapshotStore, with_added). Readers never see a part change.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace vibepit::policy {

namespace detail {
// A name with its hash worked out once: it picks the shard and then serves the shard's map.
struct HashedName {
  std::string_view name;
  std::size_t hash;
};
// Lets the maps be probed with a string_view or a HashedName, so a lookup never builds a
// std::string and hashes the name once.
//
// Not noexcept, on purpose: libstdc++'s unordered_map keeps each node's hash beside it only
// for a hasher that is "slow" or may throw (std::hash<std::string> is marked slow; a hasher
// of ours counts as fast). Without the kept hash a probe that walks a bucket hashes every
// name it passes, to find where the bucket ends, and reads each one's characters to compare
// it; with it, a probe compares two numbers per node and reads a name only when they match.
// At 100 000 rules, where those names are not in the cache, that is most of a miss's cost.
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  std::size_t operator()(const HashedName& k) const { return k.hash; }
};
struct NameEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
  bool operator()(const HashedName& a, std::string_view b) const noexcept { return a.name == b; }
  bool operator()(std::string_view a, const HashedName& b) const noexcept { return a == b.name; }
};
template <class V>
using NameMap = std::unordered_map<std::string, V, NameHash, NameEq>;

// Makes `part` this owner's own (a copy, when shared or not there yet) and returns it.
template <class T>
T& own(std::shared_ptr<T>& part) {
  if (!part) {
    part = std::make_shared<T>();
  } else if (part.use_count() > 1) {
    part = std::make_shared<T>(*part);
  }
  return *part;
}
}  // namespace detail

// A hash map from names to V, in kShards maps of their own chosen by the name's hash.
template <class V>
class CowNameMap {
 public:
  static constexpr std::size_t kShards = 256;

  const V* find(std::string_view key) const {
    const detail::HashedName k{key, detail::NameHash{}(key)};
    const auto& shard = shards_[shard_of(k.hash)];
    if (!shard) return nullptr;
    auto it = shard->find(k);
    return it == shard->end() ? nullptr : &it->second;
  }
  // The value for `key`, value-initialised if it was not there (`inserted`). Its shard is
  // made this map's own first, so the value may be changed.
  V& get_or_insert(std::string key, bool& inserted) {
    auto& shard = detail::own(shards_[shard_of(detail::NameHash{}(key))]);
    auto [it, added] = shard.try_emplace(std::move(key));
    inserted = added;
    size_ += added ? 1 : 0;
    return it->second;
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Room for about `n` more keys spread over the shards, so that building a large map
  // does not rehash each shard again and again (and the allocator does not consolidate
  // its free lists for every larger bucket array). Makes every shard this map's own.
  void reserve(std::size_t n) {
    if (n == 0) return;
    const std::size_t per_shard = n / kShards + n / kShards / 4 + 1;
    for (auto& shard : shards_) {
      auto& map = detail::own(shard);
      map.reserve(map.size() + per_shard);
    }
  }

 private:
  // The hash's top bits: the maps inside use it modulo their bucket count, so the two
  // choices stay independent.
  static std::size_t shard_of(std::size_t hash) {
    return static_cast<std::size_t>(static_cast<std::uint64_t>(hash) >> 56) % kShards;
  }

  std::array<std::shared_ptr<detail::NameMap<V>>, kShards> shards_;
  std::size_t size_ = 0;
};

// A list in chunks of kChunk entries: a copy shares every chunk, and push_back copies
// at most the last one.
template <class T>
class CowList {
 public:
  static constexpr std::size_t kChunk = 1024;

  void push_back(T v) {
    if (size_ % kChunk == 0) chunks_.emplace_back();
    auto& chunk = detail::own(chunks_.back());
    if (chunk.capacity() < kChunk) chunk.reserve(kChunk);
    chunk.push_back(std::move(v));
    ++size_;
  }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t i) const { return (*chunks_[i / kChunk])[i % kChunk]; }
  std::vector<T> to_vector() const {
    std::vector<T> out;
    out.reserve(size_);
    for (const auto& chunk : chunks_) out.insert(out.end(), chunk->begin(), chunk->end());
    return out;
  }

 private:
  std::vector<std::shared_ptr<std::vector<T>>> chunks_;
  std::size_t size_ = 0;
};

}  // namespace vibepit::policy
