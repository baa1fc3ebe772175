#pragma once
// The process heap as the C library sees it: what is in use, and what is free inside its
// arenas but still counted in the resident set. With RSS beside it, this separates a leak
// (in use grows) from memory a burst left behind (free grows): /metrics and /v1/stats
// report it.
#include <cstddef>

namespace vibepit::runtime {

struct HeapFigures {
  std::size_t in_use = 0;  // bytes handed out by malloc and not yet freed
  std::size_t free = 0;    // bytes free inside the arenas
  std::size_t mapped = 0;  // bytes in chunks of their own (mmap), part of in_use
  bool known = false;      // false where the allocator does not say (sanitizer builds)
};

HeapFigures heap_figures();

}  // namespace vibepit::runtime
