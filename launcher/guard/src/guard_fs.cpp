// project_guard.hpp's filter process: the project passed through FUSE, every change checked
// against guard_rules.cpp first. Paths from libfuse are the kernel's own lookups ("/a/b");
// each is opened beneath the project's root without following a symlink, so an entry the
// agent swaps for a symlink between the kernel's lookup and our call is never followed.
#define FUSE_USE_VERSION 312
#include <dirent.h>
#include <fcntl.h>
#include <fuse3/fuse.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/host/owned_fd.hpp"

namespace vibepit::launcher {
namespace {

constexpr std::size_t kMaxLogLines = 10000;

struct Guard {
  int root = -1;
  int log = -1;
  // Changes to names (create, mkdir, rename, link, ...) are checked and made one at a time:
  // two of them at once could each pass the check and together make a git directory.
  std::mutex names;
  std::atomic<std::size_t> logged{0};
};
Guard* g_guard = nullptr;

std::string_view rel(const char* path) {
  std::string_view p = path ? path : "";
  while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  return p;
}

// The path as a line of the log: every byte outside printable ASCII as \xNN (the names are
// the agent's).
std::string shown_path(std::string_view p) {
  std::string out;
  for (unsigned char c : p) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

int refuse(const char* op, std::string_view path, GuardRefusal r) {
  if (g_guard->log >= 0 && g_guard->logged.fetch_add(1) < kMaxLogLines) {
    const std::string line =
        std::string(op) + " " + shown_path(path) + ": refused, " + describe(r) + "\n";
    [[maybe_unused]] auto n = ::write(g_guard->log, line.data(), line.size());
  }
  return -EPERM;
}

// The parent directory of `path` and its last component.
struct Parent {
  OwnedFd dir;
  std::string name;
};

int open_parent(std::string_view path, Parent& p) {
  const auto slash = path.rfind('/');
  p.name = std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
  p.dir.fd =
      open_beneath(g_guard->root, slash == std::string_view::npos ? "" : path.substr(0, slash),
                   O_PATH | O_DIRECTORY);
  return p.dir.fd < 0 ? -errno : 0;
}

int result(int rc) {
  return rc < 0 ? -errno : rc;
}

// `at(dirfd, name, flags)` on the entry itself, never following it: the root as
// (root, "", AT_EMPTY_PATH), anything else as (its parent, its name, AT_SYMLINK_NOFOLLOW).
template <typename At>
int at_entry(const char* path, At at) {
  const auto p = rel(path);
  if (p.empty()) return result(at(g_guard->root, "", AT_EMPTY_PATH));
  Parent par;
  if (int e = open_parent(p, par)) return e;
  return result(at(par.dir.fd, par.name.c_str(), AT_SYMLINK_NOFOLLOW));
}

int guard_getattr(const char* path, struct stat* st, fuse_file_info* fi) {
  if (fi) return result(::fstat(static_cast<int>(fi->fh), st));
  return at_entry(
      path, [&](int dir, const char* name, int flags) { return ::fstatat(dir, name, st, flags); });
}

int guard_readlink(const char* path, char* buf, size_t size) {
  Parent par;
  if (int e = open_parent(rel(path), par)) return e;
  const ssize_t n = ::readlinkat(par.dir.fd, par.name.c_str(), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

// A new name: checked and made under the lock, in the one parent both look at.
template <typename Make>
int create_name(const char* op, const char* path, Make make) {
  const auto p = rel(path);
  std::lock_guard lock(g_guard->names);
  Parent par;
  if (int e = open_parent(p, par)) return e;
  if (auto r = check_create(g_guard->root, p, par.dir.fd); r != GuardRefusal::none)
    return refuse(op, p, r);
  return make(par);
}

int guard_mknod(const char* path, mode_t mode, dev_t) {
  if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode)) return -EPERM;
  return create_name("mknod", path, [&](Parent& par) {
    return result(::mknodat(par.dir.fd, par.name.c_str(), mode, 0));
  });
}

int guard_mkdir(const char* path, mode_t mode) {
  return create_name("mkdir", path, [&](Parent& par) {
    return result(::mkdirat(par.dir.fd, par.name.c_str(), mode));
  });
}

int guard_symlink(const char* target, const char* path) {
  return create_name("symlink", path, [&](Parent& par) {
    return result(::symlinkat(target, par.dir.fd, par.name.c_str()));
  });
}

int remove_name(const char* op, const char* path, int flags) {
  const auto p = rel(path);
  std::lock_guard lock(g_guard->names);
  Parent par;
  if (int e = open_parent(p, par)) return e;
  if (auto r = check_change(g_guard->root, p, par.dir.fd); r != GuardRefusal::none)
    return refuse(op, p, r);
  return result(::unlinkat(par.dir.fd, par.name.c_str(), flags));
}

int guard_unlink(const char* path) {
  return remove_name("unlink", path, 0);
}
int guard_rmdir(const char* path) {
  return remove_name("rmdir", path, AT_REMOVEDIR);
}

int guard_rename(const char* from, const char* to, unsigned int flags) {
  const auto f = rel(from), t = rel(to);
  std::lock_guard lock(g_guard->names);
  Parent pf, pt;
  if (int e = open_parent(f, pf)) return e;
  if (int e = open_parent(t, pt)) return e;
  const int root = g_guard->root;
  if (auto r = check_change(root, f, pf.dir.fd); r != GuardRefusal::none)
    return refuse("rename", f, r);
  if (auto r = check_create(root, t, pt.dir.fd); r != GuardRefusal::none)
    return refuse("rename", t, r);
  if (flags & RENAME_EXCHANGE) {  // the old name gets what the new one had
    if (auto r = check_change(root, t, pt.dir.fd); r != GuardRefusal::none)
      return refuse("rename", t, r);
    if (auto r = check_create(root, f, pf.dir.fd); r != GuardRefusal::none)
      return refuse("rename", f, r);
  }
  return result(::renameat2(pf.dir.fd, pf.name.c_str(), pt.dir.fd, pt.name.c_str(), flags));
}

int guard_link(const char* from, const char* to) {
  const auto f = rel(from);
  Parent pf;
  if (int e = open_parent(f, pf)) return e;
  {
    std::lock_guard lock(g_guard->names);
    // A second name for a file inside a git directory would be a way to change it.
    if (auto r = check_change(g_guard->root, f, pf.dir.fd); r != GuardRefusal::none)
      return refuse("link", f, r);
  }
  return create_name("link", to, [&](Parent& pt) {
    return result(::linkat(pf.dir.fd, pf.name.c_str(), pt.dir.fd, pt.name.c_str(), 0));
  });
}

// A change to an existing entry's attributes or content.
int check_path_change(const char* op, const char* path) {
  if (!path) return 0;  // an open file whose name is gone
  const auto p = rel(path);
  if (auto r = check_change(g_guard->root, p); r != GuardRefusal::none) return refuse(op, p, r);
  return 0;
}

// The entry itself, for a change through /proc/self/fd (chmod has no "do not follow").
int open_entry(const char* path, int& fd) {
  fd = open_beneath(g_guard->root, rel(path), O_PATH);
  return fd < 0 ? -errno : 0;
}

int guard_chmod(const char* path, mode_t mode, fuse_file_info* fi) {
  if (int e = check_path_change("chmod", path)) return e;
  if (fi) return result(::fchmod(static_cast<int>(fi->fh), mode));
  int fd = -1;
  if (int e = open_entry(path, fd)) return e;
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const int rc = result(::chmod(proc.c_str(), mode));
  ::close(fd);
  return rc;
}

int guard_chown(const char* path, uid_t uid, gid_t gid, fuse_file_info* fi) {
  if (int e = check_path_change("chown", path)) return e;
  if (fi) return result(::fchown(static_cast<int>(fi->fh), uid, gid));
  return at_entry(path, [&](int dir, const char* name, int flags) {
    return ::fchownat(dir, name, uid, gid, flags);
  });
}

int guard_truncate(const char* path, off_t size, fuse_file_info* fi) {
  if (int e = check_path_change("truncate", path)) return e;
  if (fi) return result(::ftruncate(static_cast<int>(fi->fh), size));
  const int fd = open_beneath(g_guard->root, rel(path), O_WRONLY);
  if (fd < 0) return -errno;
  const int rc = result(::ftruncate(fd, size));
  ::close(fd);
  return rc;
}

int guard_utimens(const char* path, const struct timespec tv[2], fuse_file_info* fi) {
  if (int e = check_path_change("utimens", path)) return e;
  if (fi) return result(::futimens(static_cast<int>(fi->fh), tv));
  return at_entry(path, [&](int dir, const char* name, int flags) {
    return ::utimensat(dir, name, tv, flags);
  });
}

bool writes(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
}

int guard_open(const char* path, fuse_file_info* fi) {
  if (writes(fi->flags))
    if (int e = check_path_change("open", path)) return e;
  const int fd = open_beneath(g_guard->root, rel(path), fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY));
  if (fd < 0) return -errno;
  fi->fh = static_cast<std::uint64_t>(fd);
  return 0;
}

int guard_create(const char* path, mode_t mode, fuse_file_info* fi) {
  return create_name("create", path, [&](Parent& par) {
    const int fd =
        ::openat(par.dir.fd, par.name.c_str(), fi->flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    fi->fh = static_cast<std::uint64_t>(fd);
    return 0;
  });
}

int guard_read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  const ssize_t n = ::pread(static_cast<int>(fi->fh), buf, size, off);
  return n < 0 ? -errno : static_cast<int>(n);
}

int guard_write(const char*, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  const ssize_t n = ::pwrite(static_cast<int>(fi->fh), buf, size, off);
  return n < 0 ? -errno : static_cast<int>(n);
}

int guard_statfs(const char*, struct statvfs* st) {
  return result(::fstatvfs(g_guard->root, st));
}

int guard_release(const char*, fuse_file_info* fi) {
  ::close(static_cast<int>(fi->fh));
  return 0;
}

int guard_fsync(const char*, int datasync, fuse_file_info* fi) {
  const int fd = static_cast<int>(fi->fh);
  return result(datasync ? ::fdatasync(fd) : ::fsync(fd));
}

int guard_fallocate(const char*, int mode, off_t off, off_t len, fuse_file_info* fi) {
  return result(::fallocate(static_cast<int>(fi->fh), mode, off, len));
}

off_t guard_lseek(const char*, off_t off, int whence, fuse_file_info* fi) {
  const off_t r = ::lseek(static_cast<int>(fi->fh), off, whence);
  return r < 0 ? -errno : r;
}

// An open directory's DIR*, which FUSE keeps for us in the integer fi->fh.
DIR* dir_of(const fuse_file_info* fi) {
  return reinterpret_cast<DIR*>(fi->fh);  // NOLINT(performance-no-int-to-ptr): FUSE's API
}

int guard_opendir(const char* path, fuse_file_info* fi) {
  const int fd = open_beneath(g_guard->root, rel(path), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return -errno;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  fi->fh = reinterpret_cast<std::uint64_t>(d);
  return 0;
}

int guard_readdir(const char*, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info* fi,
                  fuse_readdir_flags flags) {
  DIR* d = dir_of(fi);
  ::rewinddir(d);
  // Asked for "plus", each entry comes with its attributes, so that a walk that stats every
  // file (git status, a build) costs no lookup each.
  const bool plus = flags & FUSE_READDIR_PLUS;
  while (true) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (!e) return -errno;
    struct stat st {};
    auto fill_flags = static_cast<fuse_fill_dir_flags>(0);
    if (plus && ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      fill_flags = FUSE_FILL_DIR_PLUS;
    } else {
      st = {};
      st.st_ino = e->d_ino;
      st.st_mode = static_cast<mode_t>(DTTOIF(e->d_type));
    }
    if (fill(buf, e->d_name, &st, 0, fill_flags)) return 0;
  }
}

int guard_releasedir(const char*, fuse_file_info* fi) {
  ::closedir(dir_of(fi));
  return 0;
}

void* guard_init(fuse_conn_info*, fuse_config* cfg) {
  cfg->use_ino = 1;        // git's index keeps inode numbers; they stay the real ones
  cfg->nullpath_ok = 1;    // an open file whose name is gone is served by its descriptor,
  cfg->hard_remove = 1;    // so nothing like .fuse_hidden* is ever left in the project
                           // (the cost: it cannot be opened again through /proc/PID/fd)
  cfg->entry_timeout = 1;  // the user edits the project on the host meanwhile: a second at most
  cfg->attr_timeout = 1;
  cfg->negative_timeout = 0;
  cfg->auto_cache = 1;  // file pages stay cached across opens while mtime and size stay
  return nullptr;
}

fuse_operations guard_operations() {
  fuse_operations ops{};
  ops.getattr = guard_getattr;
  ops.readlink = guard_readlink;
  ops.mknod = guard_mknod;
  ops.mkdir = guard_mkdir;
  ops.unlink = guard_unlink;
  ops.rmdir = guard_rmdir;
  ops.symlink = guard_symlink;
  ops.rename = guard_rename;
  ops.link = guard_link;
  ops.chmod = guard_chmod;
  ops.chown = guard_chown;
  ops.truncate = guard_truncate;
  ops.open = guard_open;
  ops.read = guard_read;
  ops.write = guard_write;
  ops.statfs = guard_statfs;
  ops.release = guard_release;
  ops.fsync = guard_fsync;
  ops.opendir = guard_opendir;
  ops.readdir = guard_readdir;
  ops.releasedir = guard_releasedir;
  ops.init = guard_init;
  ops.create = guard_create;
  ops.utimens = guard_utimens;
  ops.fallocate = guard_fallocate;
  ops.lseek = guard_lseek;
  return ops;
}

// Root (the launcher run as root, or through sudo) mounts, then serves as the sandbox's
// user: the filter can do nothing in the project the agent could not do through a bind
// mount.
bool become(uid_t uid, gid_t gid, std::string& why) {
  if (::geteuid() != 0) return true;
  if (::setgroups(1, &gid) != 0 || ::setresgid(gid, gid, gid) != 0 ||
      ::setresuid(uid, uid, uid) != 0) {
    why = std::string("cannot become ") + std::to_string(uid) + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace

int project_guard_main(const GuardOptions& o) {
  static Guard guard;
  g_guard = &guard;
  guard.root = ::open(o.project.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (guard.root < 0) {
    std::fprintf(stderr, "cannot open %s: %s\n", o.project.c_str(), std::strerror(errno));
    return 1;
  }
  if (!o.log.empty())
    guard.log = ::open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);

  const std::string opts =
      "allow_other,default_permissions,nodev,nosuid,fsname=vibepit-guard:" + o.session_id +
      ",subtype=vibepit";
  const char* argv[] = {"vibepit-guard", "-o", opts.c_str()};
  fuse_args args = FUSE_ARGS_INIT(3, const_cast<char**>(argv));
  const fuse_operations ops = guard_operations();
  fuse* f = fuse_new(&args, &ops, sizeof ops, nullptr);
  if (!f) {
    std::fprintf(stderr, "FUSE refused the options %s\n", opts.c_str());
    return 1;
  }
  if (fuse_mount(f, o.mountpoint.c_str()) != 0) {
    std::fprintf(stderr, "cannot mount the project's view at %s\n", o.mountpoint.c_str());
    fuse_destroy(f);
    return 1;
  }

  // The server is a process of its own: a new session (no terminal's signals), and the
  // caller learns only that the view is up.
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return 1;
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    fuse_unmount(f);
    return 1;
  }
  if (pid > 0) {
    // The mount and its memory are the server's now: this process only reports, and ends
    // without tearing down what the server goes on using.
    ::close(ready[1]);
    char buf[512];
    const ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n == 2 && std::string_view(buf, 2) == "ok") ::_exit(0);
    if (n > 0) std::fwrite(buf, 1, static_cast<size_t>(n), stderr);
    std::fprintf(stderr, "the project's filter did not start\n");
    ::_exit(1);
  }
  ::close(ready[0]);
  ::setsid();
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  std::string why;
  if (!become(o.uid, o.gid, why)) {
    [[maybe_unused]] auto n = ::write(ready[1], why.data(), why.size());
    fuse_unmount(f);
    ::_exit(1);
  }
  ::prctl(PR_SET_DUMPABLE, 0);
  // The kernel has applied the agent's umask to every mode it sends; ours must not take
  // more away.
  ::umask(0);
  if (::chdir("/") != 0) ::_exit(1);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  [[maybe_unused]] auto n = ::write(ready[1], "ok", 2);
  ::close(ready[1]);
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(cfg, 8);
  fuse_loop_mt(f, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_destroy(f);
  ::_exit(0);
}

}  // namespace vibepit::launcher
