#include "vibepit/runtime/heap.hpp"

#include <malloc.h>

namespace vibepit::runtime {

HeapFigures heap_figures() {
  HeapFigures h;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = ::mallinfo2();  // every arena, under each arena's lock
  // Under a sanitizer the allocator is the sanitizer's, and glibc's arenas stay empty.
  h.known = m.arena != 0 || m.hblkhd != 0;
  h.in_use = m.uordblks + m.hblkhd;
  h.free = m.fordblks;
  h.mapped = m.hblkhd;
#endif
  return h;
}

}  // namespace vibepit::runtime
