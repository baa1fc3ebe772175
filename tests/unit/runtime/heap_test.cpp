#include "vibepit/runtime/heap.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace vibepit::runtime {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerAllocator = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerAllocator = true;
#else
constexpr bool kSanitizerAllocator = false;
#endif
#else
constexpr bool kSanitizerAllocator = false;
#endif

constexpr std::size_t kMiB = std::size_t{1} << 20;

// 8 MiB in 16 KiB blocks, each followed by a small allocation that outlives it: freeing the
// blocks leaves holes, not a shorter heap.
struct Burst {
  std::vector<void*> blocks, pins;
  Burst() {
    for (int i = 0; i < 512; ++i) {
      void* b = std::malloc(16 * 1024);
      std::memset(b, 0x5a, 16 * 1024);
      blocks.push_back(b);
      pins.push_back(std::malloc(64));
      asm volatile("" : : "r"(b), "r"(pins.back()) : "memory");
    }
  }
  void end() {
    for (void* b : blocks) std::free(b);
    blocks.clear();
  }
  ~Burst() {
    end();
    for (void* p : pins) std::free(p);
  }
};

TEST(HeapTest, TheFiguresAreKnownExactlyWhereTheCLibraryAllocates) {
  EXPECT_EQ(heap_figures().known, !kSanitizerAllocator);
}

TEST(HeapTest, InUseFollowsAllocationAndFreedMemoryShowsAsFree) {
  if (kSanitizerAllocator) {  // the sanitizer's allocator: nothing to report, zeros reported
    Burst burst;
    const HeapFigures h = heap_figures();
    EXPECT_FALSE(h.known);
    EXPECT_EQ(h.in_use, 0u);
    return;
  }
  const HeapFigures before = heap_figures();
  Burst burst;
  const HeapFigures during = heap_figures();
  EXPECT_GE(during.in_use, before.in_use + 8 * kMiB);
  burst.end();
  const HeapFigures after = heap_figures();
  EXPECT_GE(during.in_use, after.in_use + 8 * kMiB - kMiB / 8);
  EXPECT_GE(after.free, during.free + 7 * kMiB) << "the holes are free inside the heap";
}

}  // namespace
}  // namespace vibepit::runtime
