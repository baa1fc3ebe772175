// Secret memory: kept out of core dumps (the mapping's VmFlags say "dd"), wiped on release;
// and values read from a file or the environment without a trace left behind.
#include "vibepit/secret/secret.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "vibepit/secret/source.hpp"

namespace vibepit::secret {
namespace {

// The VmFlags line of the mapping that holds `p`, from /proc/self/smaps.
std::string vm_flags(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    const std::string first = line.substr(0, line.find(' '));  // "lo-hi" on a mapping's line
    if (first.find(':') == std::string::npos &&
        std::sscanf(first.c_str(), "%lx-%lx", &lo, &hi) == 2) {
      inside = at >= lo && at < hi;
    } else if (inside && line.starts_with("VmFlags:")) {
      return line;
    }
  }
  return {};
}

std::string temp_file(const std::string& content) {
  char path[] = "/tmp/vibepit-secret-test-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(SecretBytes, LivesInAMappingLeftOutOfCoreDumps) {
  SecretBytes s(64);
  s.append("token");
  EXPECT_EQ(s.reveal(), "token");
  const auto flags = vm_flags(s.reveal().data());
  ASSERT_FALSE(flags.empty());
  EXPECT_NE(flags.find(" dd"), std::string::npos) << flags;  // MADV_DONTDUMP
  if (s.locked()) {
    EXPECT_NE(flags.find(" lo"), std::string::npos) << flags;
  }
}

TEST(SecretBytes, BoundsAndShrinkingWipes) {
  EXPECT_THROW(SecretBytes(0), std::length_error);
  EXPECT_THROW(SecretBytes(SecretBytes::kMaxSize + 1), std::length_error);
  SecretBytes s(8);
  s.append("abcdefgh");
  EXPECT_THROW(s.append("i"), std::length_error);
  s.resize(3);
  EXPECT_EQ(s.reveal(), "abc");
  EXPECT_EQ(std::string(s.data() + 3, 5), std::string(5, '\0'));
  const auto fit = s.fitted();
  EXPECT_EQ(fit->reveal(), "abc");
  EXPECT_EQ(fit->capacity(), 3u);
}

TEST(SecretBytes, WipeAllClearsEveryLiveSecret) {
  SecretBytes a(16), b(16);
  a.append("alpha");
  b.append("beta");
  wipe_all();
  EXPECT_EQ(std::string(a.data(), 5), std::string(5, '\0'));
  EXPECT_EQ(std::string(b.data(), 4), std::string(4, '\0'));
}

// The heap under a WipingAllocator, which looks at each block as it is given back.
struct Returned {
  static inline std::size_t blocks = 0;
  static inline std::size_t dirty = 0;  // blocks given back with a byte not wiped
};
template <class T>
struct CheckingHeap {
  using value_type = T;
  CheckingHeap() = default;
  template <class U>
  CheckingHeap(const CheckingHeap<U>&) noexcept {}  // NOLINT: rebinding
  T* allocate(std::size_t n) { return std::allocator<T>{}.allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept {
    ++Returned::blocks;
    const auto* b = reinterpret_cast<const unsigned char*>(p);
    if (!std::all_of(b, b + n * sizeof(T), [](unsigned char c) { return c == 0; }))
      ++Returned::dirty;
    std::allocator<T>{}.deallocate(p, n);
  }
  friend bool operator==(const CheckingHeap&, const CheckingHeap&) { return true; }
};

TEST(EqualConstantTime, EqualOnlyForTheSameBytesAndLength) {
  using vibepit::secret::equal_constant_time;
  EXPECT_TRUE(equal_constant_time("tok3n-of-tenant", "tok3n-of-tenant"));
  EXPECT_TRUE(equal_constant_time("", ""));
  EXPECT_FALSE(equal_constant_time("tok3n-of-tenanT", "tok3n-of-tenant"));
  EXPECT_FALSE(equal_constant_time("Xok3n-of-tenant", "tok3n-of-tenant"));
  // A prefix, an extension and a repetition of the expected bytes are all different: the
  // comparison wraps around expected's bytes, so a repeated token must not pass.
  EXPECT_FALSE(equal_constant_time("tok3n", "tok3n-of-tenant"));
  EXPECT_FALSE(equal_constant_time("tok3n-of-tenantX", "tok3n-of-tenant"));
  EXPECT_FALSE(equal_constant_time("abab", "ab"));
  EXPECT_FALSE(equal_constant_time("", "x"));
  EXPECT_FALSE(equal_constant_time("x", ""));
  EXPECT_FALSE(equal_constant_time(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST(WipedString, EveryBlockItLeavesOrFreesIsWiped) {
  using Checked =
      std::basic_string<char, std::char_traits<char>, WipingAllocator<char, CheckingHeap<char>>>;
  Returned::blocks = Returned::dirty = 0;
  {
    Checked s;
    s.reserve(kNoInline);
    s.append("a secret long enough to live on the heap");
    for (int i = 0; i < 6; ++i) s.append(s);  // grows: each block it leaves goes back
  }
  EXPECT_GE(Returned::blocks, 4u);
  EXPECT_EQ(Returned::dirty, 0u);
}

TEST(Source, ReadsAFileWithoutItsLineEndAndLeavesIt) {
  const auto path = temp_file("ghp_example\r\n");
  const auto s = read_file(path);
  EXPECT_EQ(s->reveal(), "ghp_example");
  EXPECT_EQ(slurp(path), "ghp_example\r\n");
  ::unlink(path.c_str());
}

TEST(Source, RefusesEmptyMissingHugeAndNonRegularFilesWithoutQuotingThem) {
  const auto empty = temp_file("\n");
  EXPECT_THROW(read_file(empty), SourceError);
  const auto huge = temp_file(std::string(SecretBytes::kMaxValue + 1, 'x'));
  try {
    read_file(huge);
    ADD_FAILURE() << "a file past the limit was read";
  } catch (const SourceError& e) {
    EXPECT_EQ(std::string(e.what()).find("xxxx"), std::string::npos);
  }
  const auto fits = temp_file(std::string(SecretBytes::kMaxValue, 'y') + "\n");
  EXPECT_EQ(read_file(fits)->size(), SecretBytes::kMaxValue);
  EXPECT_THROW(read_file("/nonexistent/vibepit"), SourceError);
  EXPECT_THROW(read_file("/tmp"), SourceError);
  for (const auto& p : {empty, huge, fits}) ::unlink(p.c_str());
}

TEST(Source, TakesAnEnvironmentVariableAndLeavesNoTrace) {
  ::setenv("VIBEPIT_TEST_SECRET", "s3cr3t-value", 1);
  const char* block = std::getenv("VIBEPIT_TEST_SECRET");
  ASSERT_NE(block, nullptr);
  const auto s = take_env("VIBEPIT_TEST_SECRET");
  EXPECT_EQ(s->reveal(), "s3cr3t-value");
  EXPECT_EQ(std::getenv("VIBEPIT_TEST_SECRET"), nullptr);
  // The bytes where the value was are zero (setenv's copy here; at start, the block the
  // kernel shows in /proc/PID/environ).
  EXPECT_EQ(std::string(block, 12), std::string(12, '\0'));
  EXPECT_THROW(take_env("VIBEPIT_TEST_SECRET"), SourceError);
  ::setenv("VIBEPIT_TEST_EMPTY", "", 1);
  EXPECT_THROW(take_env("VIBEPIT_TEST_EMPTY"), SourceError);
  EXPECT_EQ(std::getenv("VIBEPIT_TEST_EMPTY"), nullptr);
}

TEST(Source, ReadsAChannelUpToItsBound) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "0123456789", 10), 10);
  ::close(fds[1]);
  EXPECT_EQ(read_all(fds[0], 10)->reveal(), "0123456789");
  ::close(fds[0]);
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "0123456789", 10), 10);
  ::close(fds[1]);
  EXPECT_THROW(read_all(fds[0], 9), SourceError);
  ::close(fds[0]);
}

}  // namespace
}  // namespace vibepit::secret
