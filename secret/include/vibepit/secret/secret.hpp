#pragma once
// Memory for secrets: credential values the proxy adds to requests for their host
// (docs/credentials.md). A secret's bytes live in a mapping of their own that is excluded
// from core dumps (MADV_DONTDUMP), locked in RAM where the process may lock memory (so never
// written to swap), and wiped when the secret is released, replaced, or the process exits.
// Nothing here formats a secret: callers see it only through reveal().
#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <string_view>

namespace vibepit::secret {

// Overwrite `n` bytes at `p` with zeros, in a way the compiler may not drop.
void wipe(void* p, std::size_t n) noexcept;

// Whether `given` equals `expected`, in a time that depends only on given's length: no byte
// of either stops the comparison early, so the time taken tells nothing of where a guessed
// token first differs, nor of expected's length.
bool equal_constant_time(std::string_view given, std::string_view expected) noexcept;

// A buffer of up to capacity() secret bytes. Not copyable: one owner, shared by pointer.
class SecretBytes {
 public:
  // The largest buffer (a start-up channel's); a credential's value is at most kMaxValue.
  static constexpr std::size_t kMaxSize = 1024 * 1024;
  static constexpr std::size_t kMaxValue = 8 * 1024;

  // Throws std::bad_alloc when the mapping cannot be made; `capacity` at most kMaxSize.
  explicit SecretBytes(std::size_t capacity);
  ~SecretBytes();
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The bytes. Copy them only into memory that is wiped after use.
  std::string_view reveal() const { return {data_, size_}; }
  char* data() { return data_; }
  // Set the size (at most capacity()); bytes past it are wiped.
  void resize(std::size_t n);
  void append(std::string_view bytes);  // throws std::length_error past capacity()
  // A copy exactly as large as the bytes, which need fewer locked pages than a buffer
  // sized for the largest value.
  std::shared_ptr<SecretBytes> fitted() const;
  // Whether mlock succeeded (RLIMIT_MEMLOCK may forbid it; the memory is still kept out of
  // core dumps and wiped).
  bool locked() const { return locked_; }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::size_t mapped_ = 0;
  bool locked_ = false;
};

using SharedSecret = std::shared_ptr<const SecretBytes>;

// Wipe every SecretBytes alive. Runs at exit (registered by the first SecretBytes made),
// and may be called before a deliberate abort.
void wipe_all() noexcept;

// An allocator whose freed blocks are wiped first, for buffers that pass secret bytes
// through ordinary memory (a control request's body): a buffer that grows leaves no copy
// behind in the block it left.
template <class T, class Base = std::allocator<T>>
struct WipingAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other =
        WipingAllocator<U, typename std::allocator_traits<Base>::template rebind_alloc<U>>;
  };
  WipingAllocator() = default;
  template <class U, class B>
  WipingAllocator(const WipingAllocator<U, B>&) noexcept {}  // NOLINT: rebinding, as std's
  T* allocate(std::size_t n) { return Base{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept {
    wipe(p, n * sizeof(T));
    Base{}.deallocate(p, n);
  }
  friend bool operator==(const WipingAllocator&, const WipingAllocator&) { return true; }
};

// A string whose heap blocks are wiped when freed. Its short-string buffer is inside the
// object: reserve(kNoInline) before the first secret byte goes in keeps every byte on the
// heap, where it is wiped.
using WipedString = std::basic_string<char, std::char_traits<char>, WipingAllocator<char>>;
inline constexpr std::size_t kNoInline = 32;

}  // namespace vibepit::secret
