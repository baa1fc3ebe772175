// The project's git directory kept from the sandbox: the session's copy, and the helpers
// both ends share (git_shield.hpp; what comes back is git_bring_back.cpp).
#include "vibepit/launcher/guard/git_shield.hpp"

#include "git_detail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "vibepit/launcher/host/process.hpp"
#include "vibepit/launcher/host/sha256.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using namespace git_detail;
using Json = nlohmann::json;

namespace {

constexpr const char* kObjectsInSandbox = "/vibepit/git/objects";

void copy_regular(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(from, ec)))
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// The regular files and directories below `from`, never a symlink.
void copy_tree(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(from, ec))) return;
  fs::create_directories(to);
  for (auto it = fs::recursive_directory_iterator(from, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const auto st = it->symlink_status();
    const fs::path dest = to / it->path().lexically_relative(from);
    if (fs::is_directory(st))
      fs::create_directories(dest);
    else if (fs::is_regular_file(st))
      fs::copy_file(it->path(), dest, fs::copy_options::overwrite_existing);
  }
}

void chown_tree(const fs::path& root, uid_t uid, gid_t gid) {
  if (::geteuid() != 0) return;
  (void)!::lchown(root.c_str(), uid, gid);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    (void)!::lchown(it->path().c_str(), uid, gid);
}

}  // namespace

namespace git_detail {

// A small regular file's content, or "" when it is missing, not regular, or too large.
std::string small_file(const fs::path& p, std::size_t max) {
  std::error_code ec;
  const auto st = fs::symlink_status(p, ec);
  if (ec || !fs::is_regular_file(st) || fs::file_size(p, ec) > max) return {};
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What makes host git run programs, as one digest: the config (and the files that could
// stand in for it) and every hook, by name, mode and content.
std::string fingerprint(const fs::path& git_dir) {
  std::string all;
  for (const char* f : {"config", "config.worktree", "commondir"}) {
    std::error_code ec;
    const auto st = fs::symlink_status(git_dir / f, ec);
    all += std::string(f) + ":" + std::to_string(static_cast<int>(st.type())) + ":" +
           sha256_hex(small_file(git_dir / f, 1 << 24)) + "\n";
  }
  std::error_code ec;
  std::vector<std::string> hooks;
  for (const auto& e : fs::directory_iterator(git_dir / "hooks", ec)) {
    std::error_code ec2;
    const auto st = e.symlink_status(ec2);
    std::string line = e.path().filename().string() + ":" +
                       std::to_string(static_cast<int>(st.type())) + ":" +
                       std::to_string(static_cast<unsigned>(st.permissions())) + ":";
    line += fs::is_symlink(st) ? fs::read_symlink(e.path(), ec2).string()
                               : sha256_hex(small_file(e.path(), 1 << 24));
    hooks.push_back(line);
  }
  std::sort(hooks.begin(), hooks.end());
  for (const auto& h : hooks) all += h + "\n";
  return sha256_hex(all);
}

// Every `.git` entry below `root` (relative paths), not descending into them or into
// symlinks, with what host git would take from it: a gitfile's (or a link's) content, a
// directory's config and hooks. The project's own .git is left out. `complete` says
// whether the walk ended before kWalkLimit.
std::map<std::string, std::string> nested_git_entries(const fs::path& root, bool& complete) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  std::size_t seen = 0;
  complete = true;
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++seen > kWalkLimit) {
      complete = false;
      break;
    }
    const auto& p = it->path();
    if (p.filename() != ".git") continue;
    it.disable_recursion_pending();
    if (p.parent_path() == root) continue;
    std::error_code ec2;
    const auto st = it->symlink_status(ec2);
    std::string what = fs::is_directory(st) ? "dir " + fingerprint(p)
                       : fs::is_symlink(st) ? "link " + fs::read_symlink(p, ec2).string()
                                            : "file " + sha256_hex(small_file(p));
    out[p.lexically_relative(root).string()] = std::move(what);
  }
  return out;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o << text;
  o.close();
  if (!o) throw std::runtime_error("cannot write " + p.string());
}

// Printable ASCII only: ref names and git's messages are shown on the user's terminal.
std::string shown(std::string_view s) {
  std::string out(s.substr(0, 300));
  for (char& c : out)
    if (c < 0x20 || c >= 0x7f) c = '?';
  return out;
}

std::string HostGit::run(std::vector<std::string> args, int& status) const {
  std::vector<std::string> argv;
  if (::geteuid() == 0 && s.owner_uid != 0)
    argv = {"setpriv",
            "--reuid",
            std::to_string(s.owner_uid),
            "--regid",
            std::to_string(s.owner_gid),
            "--clear-groups",
            "--"};
  argv.insert(argv.end(), {"git", "-C", s.project.string()});
  argv.insert(argv.end(), args.begin(), args.end());
  return run_capture(argv, status, Child::Output::pipe_with_stderr);
}

std::string HostGit::must(std::vector<std::string> args) const {
  int status = 0;
  auto out = run(args, status);
  if (status != 0)
    throw std::runtime_error("git " + args.front() + " failed (" + std::to_string(status) +
                             "): " + out.substr(0, 400));
  return out;
}

std::map<std::string, std::string> HostGit::refs(const std::string& prefix) const {
  std::map<std::string, std::string> out;
  std::vector<std::string> args = {"for-each-ref", "--format=%(objectname) %(refname)"};
  if (!prefix.empty()) args.push_back(prefix);
  std::istringstream in(must(args));
  std::string id, name;
  while (in >> id >> name) out[name] = id;
  return out;
}

}  // namespace git_detail

Json GitShieldState::to_json() const {
  const char* k = kind == Kind::directory ? "directory"
                  : kind == Kind::gitfile ? "gitfile"
                  : kind == Kind::hidden  ? "hidden"
                                          : "none";
  return {{"kind", k},
          {"project", project.string()},
          {"copy", copy.string()},
          {"session_dir", session_dir.string()},
          {"head", head},
          {"refs", refs},
          {"fingerprint", fingerprint},
          {"index", index},
          {"nested", nested},
          {"owner_uid", owner_uid},
          {"owner_gid", owner_gid},
          {"why_hidden", why_hidden}};
}

GitShieldState GitShieldState::from_json(const Json& j) {
  GitShieldState s;
  const auto k = j.value("kind", "none");
  s.kind = k == "directory" ? Kind::directory
           : k == "gitfile" ? Kind::gitfile
           : k == "hidden"  ? Kind::hidden
                            : Kind::none;
  s.why_hidden = j.value("why_hidden", "");
  s.project = j.value("project", "");
  s.copy = j.value("copy", "");
  s.session_dir = j.value("session_dir", "");
  s.head = j.value("head", "");
  s.refs = j.value("refs", std::map<std::string, std::string>{});
  s.fingerprint = j.value("fingerprint", "");
  s.index = j.value("index", "");
  s.nested = j.value("nested", std::map<std::string, std::string>{});
  s.owner_uid = j.value("owner_uid", 0u);
  s.owner_gid = j.value("owner_gid", 0u);
  return s;
}

namespace {

// The session's copy of the project's git directory, and the state at the start.
void copy_git_dir(GitShieldState& s, const fs::path& session_dir, uid_t uid, gid_t gid) {
  const fs::path git_dir = s.project / ".git";
  s.head = small_file(git_dir / "HEAD", 4096);
  s.fingerprint = fingerprint(git_dir);
  s.index = sha256_hex(small_file(git_dir / "index", std::size_t{1} << 30));
  const HostGit git{s};
  s.refs = git.refs();

  // The copy: what says where things are, and no program.
  s.copy = session_dir / "git";
  const fs::path c = s.copy;
  fs::create_directories(c);
  fs::permissions(c, fs::perms::owner_all);
  for (const char* f :
       {"HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE",
        "CHERRY_PICK_HEAD", "REVERT_HEAD", "COMMIT_EDITMSG", "packed-refs", "index", "shallow"})
    copy_regular(git_dir / f, c / f);
  copy_tree(git_dir / "refs", c / "refs");
  for (const char* d : {"refs/heads", "refs/tags", "objects/pack", "objects/info", "hooks", "info"})
    fs::create_directories(c / d);
  copy_regular(git_dir / "info" / "exclude", c / "info" / "exclude");
  write_file(c / "config",
             sandbox_git_config(git.must(
                 {"config", "--file", (git_dir / "config").string(), "--null", "--list"})));
  write_file(c / "objects" / "info" / "alternates", std::string(kObjectsInSandbox) + "\n");
  chown_tree(c, uid, gid);
}

}  // namespace

GitShieldState shield_git(const fs::path& project, const fs::path& session_dir, uid_t uid,
                          gid_t gid) {
  GitShieldState s;
  s.project = project;
  s.session_dir = session_dir;
  const fs::path git_dir = project / ".git";
  struct stat st {};
  if (::lstat(git_dir.c_str(), &st) != 0) return s;
  s.owner_uid = st.st_uid;
  s.owner_gid = st.st_gid;
  bool complete = true;
  s.nested = nested_git_entries(project, complete);
  if (S_ISREG(st.st_mode)) {
    s.kind = GitShieldState::Kind::gitfile;
  } else if (S_ISDIR(st.st_mode)) {
    s.kind = GitShieldState::Kind::directory;
    try {
      copy_git_dir(s, session_dir, uid, gid);
    } catch (const std::exception& e) {
      s.kind = GitShieldState::Kind::hidden;
      s.why_hidden = e.what();
    }
  }
  write_file(session_dir / "git-shield.json", s.to_json().dump(2) + "\n");
  return s;
}

std::vector<Json> git_mounts(const GitShieldState& s) {
  const std::string target = (s.project / ".git").string();
  switch (s.kind) {
    case GitShieldState::Kind::directory:
      return {{{"Type", "bind"}, {"Source", s.copy.string()}, {"Target", target}},
              {{"Type", "bind"},
               {"Source", (s.project / ".git" / "objects").string()},
               {"Target", kObjectsInSandbox},
               {"ReadOnly", true}}};
    case GitShieldState::Kind::gitfile:
      return {{{"Type", "bind"}, {"Source", target}, {"Target", target}, {"ReadOnly", true}}};
    case GitShieldState::Kind::hidden:
      return {{{"Type", "tmpfs"}, {"Target", target}, {"TmpfsOptions", {{"SizeBytes", 1 << 20}}}}};
    case GitShieldState::Kind::none:
      break;
  }
  return {};
}

}  // namespace vibepit::launcher
