#pragma once
// Replaces the global operator new and delete to count the allocations made on one thread:
// for the tests that hold a hot path to none. Include it in exactly one source file of an
// executable of its own (a replacement is program-wide). Set t_counting on the thread to
// watch; every allocation made there meanwhile counts in g_allocations.
#include <atomic>
#include <cstdlib>
#include <new>

namespace vibepit::testing {

inline thread_local bool t_counting = false;
inline std::atomic<long> g_allocations{0};

inline void* counted(std::size_t n, std::size_t align) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t)
                ? std::aligned_alloc(align, (n + align - 1) / align * align)
                : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace vibepit::testing

void* operator new(std::size_t n) {
  return vibepit::testing::counted(n, 0);
}
void* operator new[](std::size_t n) {
  return vibepit::testing::counted(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return vibepit::testing::counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return vibepit::testing::counted(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
