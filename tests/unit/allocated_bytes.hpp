#pragma once
// The heap bytes in use, for unit tests that assert what an operation leaves allocated:
// glibc's figure (every arena, and chunks mapped on their own), or under ASan and TSan,
// whose allocator glibc does not see, the sanitizer's.
#include <malloc.h>

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace vibepit::testing {

inline std::size_t allocated_bytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

}  // namespace vibepit::testing
