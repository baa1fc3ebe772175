#pragma once
// Memory for the objects that one worker makes and ends by the thousand a second, one at a
// time: each client connection's Session (with its shared_ptr control block, one block of
// some 500 bytes). A block that is given back is kept for the next one instead of going
// back to malloc, which at saturation is a tenth of the I/O thread's instructions.
//
// Blocks of one size only, the size of the first request; any other size goes to
// operator new. Bounded: at most `max_spare` blocks are kept, so a burst of connections
// leaves no more than that behind. One thread only: no locks. It must outlive every block
// it handed out.
#include <cstddef>
#include <new>
#include <vector>

namespace vibepit::proxy {

class BlockPool {
 public:
  explicit BlockPool(std::size_t max_spare) : max_spare_(max_spare) { spare_.reserve(max_spare); }
  ~BlockPool() {
    for (void* p : spare_) ::operator delete(p);
  }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  void* take(std::size_t size) {
    if (size_ == 0) size_ = size;
    if (size != size_ || spare_.empty()) return ::operator new(size);
    void* p = spare_.back();
    spare_.pop_back();
    return p;
  }

  void give(void* p, std::size_t size) noexcept {
    if (size != size_ || spare_.size() >= max_spare_) return ::operator delete(p);
    spare_.push_back(p);  // within the reserved capacity: no allocation
  }

  std::size_t spare() const { return spare_.size(); }

 private:
  std::size_t max_spare_;
  std::size_t size_ = 0;
  std::vector<void*> spare_;
};

// An allocator over a BlockPool, for std::allocate_shared.
template <class T>
struct PoolAllocator {
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "operator new's alignment");
  using value_type = T;
  BlockPool* pool;

  explicit PoolAllocator(BlockPool& p) : pool(&p) {}
  template <class U>
  PoolAllocator(const PoolAllocator<U>& other) : pool(other.pool) {}  // NOLINT: rebinding

  T* allocate(std::size_t n) { return static_cast<T*>(pool->take(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { pool->give(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const PoolAllocator<U>& other) const {
    return pool == other.pool;
  }
};

}  // namespace vibepit::proxy
