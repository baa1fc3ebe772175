#include "vibepit/launcher/host/untrusted_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "vibepit/launcher/host/owned_fd.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what, int err = 0) {
  throw UntrustedFileError(err ? what + ": " + std::strerror(err) : what);
}

// The file's directory, its last component opened with O_NOFOLLOW (the part above it is the
// user's own choice of path). -1 with errno ENOENT when it does not exist and !create.
// As root, a file or directory vibepit makes in someone else's directory is theirs, as if
// they had made it: `like`'s owner (the file it replaces, or the directory it is made in)
// becomes `made`'s. As anyone else, what vibepit makes is its user's already.
void own_like(int made, int like) {
  struct stat st {};
  if (::geteuid() != 0 || ::fstat(like, &st) != 0) return;
  if ((st.st_uid != 0 || st.st_gid != 0) && ::fchown(made, st.st_uid, st.st_gid) != 0)
    fail("cannot give a file its owner's uid " + std::to_string(st.st_uid), errno);
}

// mkdirat and open, the new directory owned as `up` is (own_like); -1 with errno when
// the open fails.
int make_dir_at(int up, const std::string& name, const fs::path& shown) {
  const bool made = ::mkdirat(up, name.c_str(), 0755) == 0;
  if (!made && errno != EEXIST) fail("cannot create " + shown.string(), errno);
  const int fd = ::openat(up, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && made) own_like(fd, up);
  return fd;
}

int open_parent(const fs::path& path, bool create) {
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  fs::path above = dir.parent_path();
  if (above.empty()) above = ".";
  std::string last = dir.filename().string();
  if (last.empty()) {  // "/" or a trailing slash: the directory itself
    last = ".";
    above = dir;
  }
  OwnedFd up(::open(above.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (up.fd < 0) {
    if (errno == ENOENT && !create) return -1;
    fail("cannot open " + above.string(), errno);
  }
  int fd = ::openat(up.fd, last.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) fd = make_dir_at(up.fd, last, dir);
  if (fd < 0) {
    if (errno == ENOENT && !create) return -1;
    if (errno == ELOOP || errno == ENOTDIR)
      fail(dir.string() + " is not a directory (a symlink is not followed here)");
    fail("cannot open " + dir.string(), errno);
  }
  return fd;
}

}  // namespace

std::optional<uid_t> owner_trusted_by_root(const fs::path& project_root) {
  struct stat st {};
  if (::geteuid() != 0 || ::stat(project_root.c_str(), &st) != 0) return std::nullopt;
  return st.st_uid;
}

std::optional<std::string> read_untrusted_file(const fs::path& path, std::size_t max_bytes,
                                               std::optional<uid_t> also_owner) {
  OwnedFd dir(open_parent(path, false));
  if (dir.fd < 0) return std::nullopt;
  const std::string name = path.filename().string();
  OwnedFd f(::openat(dir.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (f.fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ELOOP) fail(path.string() + " is a symlink; vibepit does not follow it");
    fail("cannot read " + path.string(), errno);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot read " + path.string(), errno);
  if (!S_ISREG(st.st_mode)) fail(path.string() + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != also_owner)
    fail(path.string() + " belongs to uid " + std::to_string(st.st_uid) +
         ", not to you; vibepit reads only your own files there");
  if (static_cast<std::size_t>(st.st_size) > max_bytes)
    fail(path.string() + " is larger than " + std::to_string(max_bytes) + " bytes");
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read " + path.string(), errno);
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_bytes)
      fail(path.string() + " is larger than " + std::to_string(max_bytes) + " bytes");
  }
  return out;
}

namespace {

// Replace `name` in the directory `dir` (shown as `shown`) atomically.
void write_at(int dir, const std::string& name, const std::string& content, const fs::path& shown) {
  const std::string tmp = name + ".tmp";
  const fs::path shown_tmp = shown.parent_path() / tmp;
  // Whatever sits at the temporary's name (a planted symlink, a stale file) goes; unlinkat
  // removes a link itself, never what it points at. O_EXCL then refuses anything new there.
  if (::unlinkat(dir, tmp.c_str(), 0) != 0 && errno != ENOENT)
    fail("cannot replace " + shown_tmp.string(), errno);
  OwnedFd f(::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (f.fd < 0) fail("cannot write " + shown_tmp.string(), errno);
  // The replacement keeps the file's owner and mode; a new file is the directory owner's.
  OwnedFd old(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (old.fd >= 0 && ::fstat(old.fd, &st) == 0 && S_ISREG(st.st_mode)) {
    own_like(f.fd, old.fd);
    ::fchmod(f.fd, st.st_mode & 07777);
  } else {
    own_like(f.fd, dir);
  }
  std::size_t off = 0;
  while (off < content.size()) {
    const ssize_t n = ::write(f.fd, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::unlinkat(dir, tmp.c_str(), 0);
      fail("cannot write " + shown.string(), err);
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(f.fd) != 0 || ::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(dir, tmp.c_str(), 0);
    fail("cannot write " + shown.string(), err);
  }
}

// `rel` opened component by component from `from` (shown as `shown`), no component
// followed if it is a symlink, each made when missing.
int open_beneath(int from, const fs::path& rel, const fs::path& shown) {
  int fd = ::dup(from);
  if (fd < 0) fail("cannot open " + shown.string(), errno);
  fs::path walked = shown;
  for (const auto& part : rel) {
    const std::string c = part.string();
    if (c.empty() || c == ".") continue;
    OwnedFd up(fd);
    fd = ::openat(up.fd, c.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) fd = make_dir_at(up.fd, c, walked / c);
    walked /= c;
    if (fd < 0) {
      if (errno == ELOOP || errno == ENOTDIR)
        fail(walked.string() + " is not a directory (a symlink is not followed here)");
      fail("cannot open " + walked.string(), errno);
    }
  }
  return fd;
}

}  // namespace

void write_untrusted_file(const fs::path& path, const std::string& content) {
  OwnedFd dir(open_parent(path, true));
  write_at(dir.fd, path.filename().string(), content, path);
}

OutputDir::OutputDir(const fs::path& dir, const fs::path& anchor) {
  std::error_code ec;
  const fs::path cwd = dir.is_absolute() ? fs::path() : fs::canonical(fs::current_path(), ec);
  if (ec) fail("cannot find the current directory", ec.value());
  dir_ = (dir.is_absolute() ? dir : cwd / dir).lexically_normal();
  const fs::path rel = dir_.lexically_relative(anchor);
  if (!anchor.empty() && !rel.empty() && *rel.begin() != "..") {
    OwnedFd root(::open(anchor.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root.fd < 0) fail("cannot open " + anchor.string(), errno);
    fd_ = open_beneath(root.fd, rel, anchor);
    return;
  }
  fs::create_directories(dir_, ec);
  if (ec) fail("cannot create " + dir_.string(), ec.value());
  fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) fail("cannot open " + dir_.string(), errno);
}

OutputDir::~OutputDir() {
  if (fd_ >= 0) ::close(fd_);
}

OutputDir::OutputDir(OutputDir&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)) {}

void OutputDir::write(const std::string& name, const std::string& content) const {
  write_at(fd_, name, content, dir_ / name);
}

}  // namespace vibepit::launcher
