// project_guard.hpp's rules: what the sandbox may not make in the project.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <string>

#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/host/owned_fd.hpp"

namespace vibepit::launcher {
namespace {

bool present(int dirfd, const char* name, std::string_view adding) {
  if (adding == name) return true;
  struct stat st {};
  return ::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

// What git takes, beside HEAD, for the rest of a git directory.
bool git_dir_part(std::string_view name) {
  return name == "HEAD" || name == "objects" || name == "refs" || name == "commondir";
}

// Linux before 5.6 has no openat2: the same walk, one component at a time.
int open_beneath_walk(int root, std::string_view path, int flags, mode_t mode) {
  int dir = ::dup(root);
  if (dir < 0) return -1;
  while (true) {
    const auto slash = path.find('/');
    const std::string comp(path.substr(0, slash));
    if (comp.empty() || comp == "." || comp == "..") {
      ::close(dir);
      errno = EINVAL;
      return -1;
    }
    const bool last = slash == std::string_view::npos;
    const int next =
        last ? ::openat(dir, comp.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
             : ::openat(dir, comp.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int saved = errno;
    ::close(dir);
    if (next < 0) {
      errno = saved;
      return -1;
    }
    if (last) return next;
    dir = next;
    path.remove_prefix(slash + 1);
  }
}

}  // namespace

bool is_git_name(std::string_view name) {
  if (name.size() != 4 || name[0] != '.') return false;
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
  return lower(name[1]) == 'g' && lower(name[2]) == 'i' && lower(name[3]) == 't';
}

bool is_git_dir(int dirfd, std::string_view adding) {
  if (!present(dirfd, "HEAD", adding)) return false;
  if (present(dirfd, "commondir", adding)) return true;
  return present(dirfd, "objects", adding) && present(dirfd, "refs", adding);
}

const char* describe(GuardRefusal r) {
  switch (r) {
    case GuardRefusal::none:
      return "allowed";
    case GuardRefusal::git_name:
      return "an entry named .git";
    case GuardRefusal::inside_git:
      return "a change inside a git directory";
    case GuardRefusal::makes_git_dir:
      return "it would make a git directory";
  }
  return "?";
}

int open_beneath(int root, std::string_view path, int flags, mode_t mode) {
  if (path.empty()) return ::openat(root, ".", flags | O_CLOEXEC, mode);
  static std::atomic<bool> no_openat2{false};
  if (!no_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    const std::string p(path);
    const long fd = ::syscall(SYS_openat2, root, p.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
    no_openat2.store(true, std::memory_order_relaxed);
  }
  return open_beneath_walk(root, path, flags, mode);
}

namespace {

// The directories above `path`'s last component: its parent (the caller's, or opened here)
// and the parent's parent (-1 where there is none, or it is not a directory we can reach).
struct Above {
  OwnedFd own_parent, grandparent;
  int parent = -1;
  std::string_view name;
};

void open_above(int root, std::string_view path, int parent, Above& a) {
  const auto slash = path.rfind('/');
  a.name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  const std::string_view dir = slash == std::string_view::npos ? "" : path.substr(0, slash);
  a.parent =
      parent >= 0 ? parent : (a.own_parent.fd = open_beneath(root, dir, O_PATH | O_DIRECTORY));
  if (dir.empty()) return;  // the root's parent is not the project's
  const auto up = dir.rfind('/');
  a.grandparent.fd = open_beneath(root, up == std::string_view::npos ? "" : dir.substr(0, up),
                                  O_PATH | O_DIRECTORY);
}

bool below_git_name(std::string_view path) {
  while (!path.empty()) {
    const auto slash = path.find('/');
    if (is_git_name(path.substr(0, slash))) return true;
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return false;
}

GuardRefusal inside_git_dir(const Above& a) {
  if (a.parent >= 0 && is_git_dir(a.parent)) return GuardRefusal::inside_git;
  if (a.grandparent.fd >= 0 && is_git_dir(a.grandparent.fd)) return GuardRefusal::inside_git;
  return GuardRefusal::none;
}

}  // namespace

GuardRefusal check_create(int root, std::string_view path, int parent) {
  if (path.empty()) return GuardRefusal::none;
  const auto slash = path.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (is_git_name(name)) return GuardRefusal::git_name;
  if (below_git_name(path)) return GuardRefusal::inside_git;
  Above a;
  open_above(root, path, parent, a);
  if (const auto r = inside_git_dir(a); r != GuardRefusal::none) return r;
  if (git_dir_part(name) && a.parent >= 0 && is_git_dir(a.parent, name))
    return GuardRefusal::makes_git_dir;
  return GuardRefusal::none;
}

GuardRefusal check_change(int root, std::string_view path, int parent) {
  if (path.empty()) return GuardRefusal::none;
  if (below_git_name(path)) return GuardRefusal::inside_git;
  Above a;
  open_above(root, path, parent, a);
  return inside_git_dir(a);
}

}  // namespace vibepit::launcher
