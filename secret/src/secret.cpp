#include "vibepit/secret/secret.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_set>

namespace vibepit::secret {
namespace {

// Every live SecretBytes, so that exit wipes them however the process leaves main.
struct Registry {
  std::mutex mu;
  std::unordered_set<SecretBytes*> live;
};

Registry& registry() {
  // Never destroyed: SecretBytes in static objects may outlive any static registry.
  static auto* r = new Registry;
  return *r;
}

void register_exit_wipe() {
  static const bool once = [] { return std::atexit([] { wipe_all(); }) == 0; }();
  (void)once;
}

std::size_t page_size() {
  static const auto n = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return n;
}

}  // namespace

void wipe(void* p, std::size_t n) noexcept {
  if (p != nullptr && n != 0) ::explicit_bzero(p, n);
}

bool equal_constant_time(std::string_view given, std::string_view expected) noexcept {
  // Every byte of `given` is compared, with expected's bytes read in turn (from the start
  // again past its end): one pass whose length is given's, and no branch on a byte.
  std::size_t diff = given.size() ^ expected.size();
  const std::size_t n = expected.size();
  for (std::size_t i = 0, j = 0; i < given.size(); ++i) {
    const auto e = n == 0 ? std::uint8_t{0} : static_cast<std::uint8_t>(expected[j]);
    diff |= static_cast<std::uint8_t>(given[i]) ^ e;
    j = j + 1 == n ? 0 : j + 1;
  }
  // The optimiser may not turn the loop into an early exit on a difference found.
  asm volatile("" : "+r"(diff));
  return diff == 0;
}

SecretBytes::SecretBytes(std::size_t capacity) : capacity_(capacity) {
  if (capacity == 0 || capacity > kMaxSize)
    throw std::length_error("a secret holds 1 to " + std::to_string(kMaxSize) + " bytes");
  const std::size_t page = page_size();
  mapped_ = (capacity + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Out of core dumps is the promise: a mapping that cannot be excluded is not used.
  if (::madvise(p, mapped_, MADV_DONTDUMP) != 0) {
    ::munmap(p, mapped_);
    throw std::bad_alloc();
  }
  // Locked where RLIMIT_MEMLOCK allows; otherwise the pages may be swapped, and locked()
  // says so. The system call itself: sanitizer runtimes replace mlock() with a no-op that
  // reports success.
  locked_ = ::syscall(SYS_mlock, p, mapped_) == 0;
  data_ = static_cast<char*>(p);
  register_exit_wipe();
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.live.insert(this);
}

SecretBytes::~SecretBytes() {
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    r.live.erase(this);
  }
  wipe(data_, mapped_);
  if (locked_) ::syscall(SYS_munlock, data_, mapped_);
  ::munmap(data_, mapped_);
}

void SecretBytes::resize(std::size_t n) {
  if (n > capacity_) throw std::length_error("secret larger than its buffer");
  if (n < size_) wipe(data_ + n, size_ - n);
  size_ = n;
}

void SecretBytes::append(std::string_view bytes) {
  if (bytes.size() > capacity_ - size_) throw std::length_error("secret larger than its buffer");
  std::memcpy(data_ + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
}

std::shared_ptr<SecretBytes> SecretBytes::fitted() const {
  auto out = std::make_shared<SecretBytes>(std::max<std::size_t>(size_, 1));
  out->append(reveal());
  return out;
}

void wipe_all() noexcept {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  for (SecretBytes* s : r.live) wipe(s->data(), s->capacity());
}

}  // namespace vibepit::secret
