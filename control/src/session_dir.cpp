#include "vibepit/control/session_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/rand.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace vibepit::control {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what, int err = 0) {
  throw std::runtime_error(err ? what + ": " + std::strerror(err) : what);
}

// Create `dir` and any missing parents as 0700; an existing leaf is tightened to 0700.
void make_private_dir(const fs::path& dir) {
  fs::path walk;
  for (const auto& part : dir) {
    walk /= part;
    if (::mkdir(walk.c_str(), 0700) != 0 && errno != EEXIST)
      fail("cannot create " + walk.string(), errno);
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) fail("cannot stat " + dir.string(), errno);
  if (!S_ISDIR(st.st_mode)) fail(dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid()) fail(dir.string() + " belongs to another user");
  if ((st.st_mode & 0777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
    fail("cannot chmod 0700 " + dir.string(), errno);
  }
}

// Write to a temporary name in the same directory, then rename: readers never see a torn file.
void write_private_file(const fs::path& path, const std::string& data) {
  fs::path tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) fail("cannot write " + tmp.string(), errno);
  bool ok = ::fchmod(fd, 0600) == 0;
  std::size_t off = 0;
  while (ok && off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += static_cast<std::size_t>(n);
  }
  int err = errno;
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot write " + path.string(), err ? err : errno);
  }
}

std::string read_file(const fs::path& path, bool secret) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot read " + path.string(), errno);
  if (secret && (st.st_mode & 0077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    fail(path.string() + " is readable by other users (mode " + mode.str() + "); run: chmod 600 " +
         path.string());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

fs::path default_sessions_root() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state && *state == '/') return fs::path(state) / "vibepit" / "sessions";
  const char* home = std::getenv("HOME");
  if (!home || *home != '/') fail("neither XDG_STATE_HOME nor HOME is set to an absolute path");
  return fs::path(home) / ".local" / "state" / "vibepit" / "sessions";
}

std::string new_session_id() {
  unsigned char bytes[6];
  if (RAND_bytes(bytes, sizeof bytes) != 1) fail("no randomness for a session id");
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (unsigned char b : bytes) {
    id += hex[b >> 4];
    id += hex[b & 15];
  }
  return id;
}

void write_client_set(const fs::path& dir, const PeerCredentials& client, const SessionInfo& info) {
  make_private_dir(dir);
  write_private_file(dir / "ca.pem", client.ca_cert_pem);
  write_private_file(dir / "client.pem", client.own.cert_pem);
  write_private_file(dir / "client-key.pem", client.own.key_pem);
  nlohmann::json j = {
      {"id", info.id}, {"control", info.control}, {"pid", info.pid}, {"created", info.created}};
  if (!info.project.empty()) j["project"] = info.project;
  write_private_file(dir / "session.json", j.dump(2) + "\n");
}

StoredSession read_client_set(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail("no session directory " + dir.string(), errno);
  if (!S_ISDIR(st.st_mode)) fail(dir.string() + " is not a directory");
  if ((st.st_mode & 0077) != 0) {
    fail(dir.string() + " is accessible to other users; run: chmod 700 " + dir.string());
  }
  StoredSession out;
  out.dir = dir;
  out.client.ca_cert_pem = read_file(dir / "ca.pem", false);
  out.client.own.cert_pem = read_file(dir / "client.pem", false);
  out.client.own.key_pem = read_file(dir / "client-key.pem", true);
  auto text = read_file(dir / "session.json", false);
  try {
    auto j = nlohmann::json::parse(text);
    out.info.id = j.at("id").get<std::string>();
    out.info.control = j.at("control").get<std::string>();
    out.info.pid = j.value("pid", std::int64_t{0});
    out.info.created = j.value("created", std::string());
    out.info.project = j.value("project", std::string());
  } catch (const nlohmann::json::exception& e) {
    fail((dir / "session.json").string() + ": " + e.what());
  }
  return out;
}

std::vector<fs::path> list_session_dirs(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.is_directory(ec) && fs::exists(entry.path() / "session.json", ec)) {
      out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace vibepit::control
