#pragma once
// A file descriptor closed when it goes out of scope.
#include <unistd.h>

namespace vibepit::launcher {

struct OwnedFd {
  int fd = -1;
  explicit OwnedFd(int f = -1) : fd(f) {}
  ~OwnedFd() {
    if (fd >= 0) ::close(fd);
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
};

}  // namespace vibepit::launcher
