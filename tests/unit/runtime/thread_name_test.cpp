#include "vibepit/runtime/thread_name.hpp"

#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace vibepit::runtime {
namespace {

// The name the kernel reports (what ps, top and gdb show) for a new thread that was given
// `name`.
std::string name_seen_for(const std::string& name) {
  std::string seen;
  std::thread([&] {
    name_this_thread(name);
    std::ifstream f("/proc/thread-self/comm");
    std::getline(f, seen);
  }).join();
  return seen;
}

TEST(ThreadName, TheKernelReportsTheName) {
  EXPECT_EQ(name_seen_for("vp-proxy-1"), "vp-proxy-1");
}

TEST(ThreadName, ALongNameIsCutToFifteenBytesNotRefused) {
  EXPECT_EQ(name_seen_for("vp-proxy-123456789"), "vp-proxy-123456");
}

}  // namespace
}  // namespace vibepit::runtime
