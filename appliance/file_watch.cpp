#include "file_watch.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string_view>

#include <spdlog/spdlog.h>

namespace vibepit::appliance {
namespace {

// How long the directory must be quiet after an event before the file is read: an editor's
// save or a ConfigMap's swap is several events, and one read should see their end.
constexpr int kSettleMs = 100;
constexpr int kSettleMaxMs = 400;
// The slow re-read, for filesystems that report nothing (a bind mount changed outside).
constexpr int kRescanMs = 5000;

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

// The names in the files' directories whose change can change what a path reads: its own,
// and, when it is a symbolic link into that directory (a ConfigMap's "rules.yaml ->
// ..data/rules.yaml"), the first name of the link's target. Other files there (a busy
// directory) are not watched for. (A name that matters in one directory wakes the watch in
// another too: one read too many, never one too few.)
std::vector<std::string> names_that_matter(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  for (const auto& path : paths) {
    names.push_back(base_name(path));
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
    if (n > 0 && target[0] != '/') {
      const std::string t(target, static_cast<std::size_t>(n));
      names.push_back(t.substr(0, t.find('/')));
    }
  }
  return names;
}

// Reads every pending inotify event; true when one was about a name in `names`, or about
// the directory itself.
bool drain(int fd, const std::vector<std::string>& names) {
  alignas(inotify_event) std::array<char, 8192> buf;
  bool relevant = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) return relevant;  // EAGAIN: nothing more
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf.data() + at);
      const std::string_view name = ev->len ? std::string_view(ev->name) : std::string_view();
      if (ev->len == 0 || (ev->mask & IN_Q_OVERFLOW) != 0 ||
          std::find(names.begin(), names.end(), name) != names.end()) {
        relevant = true;
      }
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
}

}  // namespace

FileWatch::FileWatch(std::string what, std::vector<std::string> paths,
                     std::function<void()> changed)
    : what_(std::move(what)), paths_(std::move(paths)), changed_(std::move(changed)) {
  inotify_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  stop_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inotify_ < 0 || stop_ < 0) {
    const int err = errno;
    if (inotify_ >= 0) ::close(inotify_);
    if (stop_ >= 0) ::close(stop_);
    throw std::runtime_error(what_ + ": cannot watch: " + std::strerror(err));
  }
  std::set<std::string> dirs;
  for (const auto& p : paths_) dirs.insert(directory_of(p));
  constexpr std::uint32_t kEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE |
                                    IN_DELETE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
  for (const auto& dir : dirs) {
    if (::inotify_add_watch(inotify_, dir.c_str(), kEvents) < 0) {
      // Watched or not, the slow re-read still applies changes.
      spdlog::warn("{}: cannot watch {} ({}); re-reading every {} ms instead", what_, dir,
                   std::strerror(errno), kRescanMs);
    }
  }
  thread_ = std::thread([this] { run(); });
}

FileWatch::~FileWatch() {
  const std::uint64_t one = 1;
  if (::write(stop_, &one, sizeof one) < 0) {
    // The thread still stops at its next wake; nothing else to do here.
  }
  if (thread_.joinable()) thread_.join();
  ::close(inotify_);
  ::close(stop_);
}

void FileWatch::run() {
  std::array<pollfd, 2> fds{{{inotify_, POLLIN, 0}, {stop_, POLLIN, 0}}};
  auto next_rescan = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRescanMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        next_rescan - std::chrono::steady_clock::now());
    const int n =
        ::poll(fds.data(), fds.size(), static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (n < 0 && errno != EINTR) {
      spdlog::error("{}: poll failed ({}); no longer watching", what_, std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    bool changed = false;
    if (fds[0].revents != 0 && drain(inotify_, names_that_matter(paths_))) {
      // Wait for the file's names to settle (an editor's save, a ConfigMap's swap are
      // several events), but no longer than kSettleMaxMs, then read once.
      changed = true;
      const auto settle_end =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(kSettleMaxMs);
      while (std::chrono::steady_clock::now() < settle_end) {
        pollfd quiet[2] = {{inotify_, POLLIN, 0}, {stop_, POLLIN, 0}};
        const int q = ::poll(quiet, 2, kSettleMs);
        if (q > 0 && quiet[1].revents != 0) return;
        if (q <= 0 || !drain(inotify_, names_that_matter(paths_))) break;
      }
    }
    if (changed || std::chrono::steady_clock::now() >= next_rescan) {
      changed_();
      next_rescan = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRescanMs);
    }
  }
}

}  // namespace vibepit::appliance
