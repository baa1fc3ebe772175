#pragma once
// Names the calling thread as `top -H`, `ps -L`, /proc/PID/task/TID/comm and gdb show it:
// "vp-proxy-0", "vp-log", "vp-control". The kernel keeps 15 bytes; the rest is cut.
#include <pthread.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

namespace vibepit::runtime {

inline void name_this_thread(std::string_view name) {
  std::array<char, 16> buf{};
  std::memcpy(buf.data(), name.data(), std::min(name.size(), buf.size() - 1));
  pthread_setname_np(pthread_self(), buf.data());  // best effort: a name is only a label
}

}  // namespace vibepit::runtime
