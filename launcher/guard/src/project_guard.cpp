// project_guard.hpp, the launcher's side: start the filter process, find and unmount it.
#include "vibepit/launcher/guard/project_guard.hpp"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "vibepit/launcher/host/process.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kSourcePrefix = "vibepit-guard:";

fs::path self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find vibepit's own binary: " + ec.message());
  return p;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const auto oct = s.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string_view::npos) {
        out += static_cast<char>(std::stoi(std::string(oct), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// fusermount3 lets an ordinary user's mount be reached by others (the engine) only then.
bool user_allow_other() {
  std::ifstream in("/etc/fuse.conf");
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    if (line == "user_allow_other") return true;
  }
  return false;
}

// One line of /proc/self/mountinfo:
// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
struct MountInfo {
  fs::path mountpoint;  // unescaped
  bool shared = false;  // an optional field "shared:N"
  std::string fstype, source;
};

std::optional<MountInfo> parse_mountinfo_line(const std::string& line) {
  const auto dash = line.find(" - ");
  if (dash == std::string::npos) return std::nullopt;
  std::istringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
  std::string id, parent, dev, root, mountpoint, options, field;
  if (!(head >> id >> parent >> dev >> root >> mountpoint >> options)) return std::nullopt;
  MountInfo m;
  m.mountpoint = unescape_mountinfo(mountpoint);
  while (head >> field) m.shared = m.shared || field.rfind("shared:", 0) == 0;
  tail >> m.fstype >> m.source;
  return m;
}

struct GuardMount {
  std::string session_id;
  fs::path mountpoint;
};

std::vector<GuardMount> guard_mounts() {
  std::vector<GuardMount> out;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const auto m = parse_mountinfo_line(line);
    if (!m || m->fstype != "fuse.vibepit" || m->source.rfind(kSourcePrefix, 0) != 0) continue;
    out.push_back({m->source.substr(kSourcePrefix.size()), m->mountpoint});
  }
  return out;
}

}  // namespace

fs::path start_project_guard(const fs::path& project, const fs::path& session_dir,
                             const std::string& session_id, uid_t uid, gid_t gid) {
  struct stat st {};
  if (::stat("/dev/fuse", &st) != 0 || !S_ISCHR(st.st_mode))
    throw std::runtime_error(
        "the project's filter needs FUSE, and there is no /dev/fuse here: load the fuse "
        "module, or give this container the device (docs/security.md)");
  if (::access("/dev/fuse", R_OK | W_OK) != 0)
    throw std::runtime_error(
        "the project's filter needs FUSE, and /dev/fuse is closed to this user (" +
        std::string(std::strerror(errno)) +
        "): it is open to everyone (mode 0666) where udev runs; `chmod 0666 /dev/fuse` "
        "as root does the same (scripts/install-deps.sh does)");
  if (::geteuid() != 0 && !user_allow_other())
    throw std::runtime_error(
        "the project's filter, mounted by an ordinary user, must be reachable by the Docker "
        "engine: add the line user_allow_other to /etc/fuse.conf (scripts/install-deps.sh "
        "does; docs/security.md says why)");
  fs::path mountpoint = session_dir / "project";
  std::error_code ec;
  fs::create_directory(mountpoint, ec);
  // Unmounted, it holds only this: a sandbox given it by mistake (an engine that does not
  // see this mount namespace's mounts) shows what went wrong instead of an empty project.
  std::ofstream(mountpoint / "VIBEPIT-PROJECT-FILTER-NOT-MOUNTED")
      << "The Docker engine did not see vibepit's project filter mounted here; see "
         "docs/security.md.\n";
  std::vector<std::string> argv = {
      self_exe().string(), "__project-guard",
      project.string(),    mountpoint.string(),
      session_id,          std::to_string(uid),
      std::to_string(gid), (session_dir / "project-guard.log").string()};
  int status = 0;
  const std::string said = run_capture(argv, status, Child::Output::pipe_with_stderr);
  if (status != 0) {
    std::string why = said;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    for (auto& c : why)
      if (c == '\n') c = ';';
    throw std::runtime_error("the project's filter did not start: " +
                             (why.empty() ? "exit " + std::to_string(status) : why));
  }
  return mountpoint;
}

namespace {

bool still_mounted(const fs::path& mountpoint) {
  for (const auto& m : guard_mounts())
    if (m.mountpoint == mountpoint) return true;
  return false;
}

}  // namespace

std::string stop_project_guard(const std::string& session_id) {
  for (const auto& m : guard_mounts()) {
    if (m.session_id != session_id) continue;
    if (::geteuid() == 0) {
      if (::umount2(m.mountpoint.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        return "unmounting " + m.mountpoint.string() + ": " + std::strerror(errno);
    } else {
      int status = 0;
      const std::string said = run_capture({"fusermount3", "-u", "-z", m.mountpoint.string()},
                                           status, Child::Output::pipe_with_stderr);
      // Another vibepit may unmount it meanwhile (`vibepit down` racing the attached run's
      // own cleanup): a failure counts only while the filter is still mounted.
      if (status != 0 && still_mounted(m.mountpoint))
        return "unmounting " + m.mountpoint.string() + ": " + said;
    }
  }
  return {};
}

std::vector<std::string> mounted_project_guards() {
  std::vector<std::string> out;
  for (const auto& m : guard_mounts()) out.push_back(m.session_id);
  return out;
}

std::string private_mount_holding(std::string_view mountinfo, const fs::path& path) {
  const fs::path target = path.lexically_normal();
  std::string best_state;
  std::size_t best_depth = 0;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    const auto m = parse_mountinfo_line(line);
    if (!m) continue;
    const fs::path at = m->mountpoint.lexically_normal();
    // `at` holds `target` when it is a prefix of it, component by component.
    auto t = target.begin();
    std::size_t depth = 0;
    bool holds = true;
    for (const auto& a : at) {
      if (a.empty()) continue;  // the trailing "" of "/dir/"
      if (t == target.end() || a != *t) {
        holds = false;
        break;
      }
      ++t;
      ++depth;
    }
    // Later lines stack on earlier ones at the same point.
    if (holds && depth >= best_depth) {
      best_depth = depth;
      best_state = m->shared ? "" : at.string();
    }
  }
  return best_state;
}

std::string private_mount_holding(const fs::path& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::stringstream text;
  text << in.rdbuf();
  return private_mount_holding(text.str(), path);
}

std::size_t project_guard_refusals(const fs::path& session_dir) {
  std::ifstream in(session_dir / "project-guard.log");
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

}  // namespace vibepit::launcher
