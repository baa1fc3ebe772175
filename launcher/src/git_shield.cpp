// The project's git directory kept from the sandbox: the session's copy, and what comes back
// from it (git_shield.hpp).
#include "vibepit/launcher/git_shield.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/images.hpp"
#include "vibepit/launcher/process.hpp"
#include "vibepit/launcher/project_guard.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

constexpr const char* kObjectsInSandbox = "/vibepit/git/objects";
// How many entries a walk of the project (or of the session's copy) looks at, at most: the
// sandbox can make files faster than anyone wants to wait for.
constexpr std::size_t kWalkLimit = 2'000'000;

// A small regular file's content, or "" when it is missing, not regular, or too large.
std::string small_file(const fs::path& p, std::size_t max = 1 << 16) {
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

// The session's copy where the owner's git can read it. vibepit run as root keeps it in
// root's state directory, which no one else may enter: the copy is bound, for the fetch
// only, at a directory of the owner's own in /tmp. As the owner, or when the bind is not
// possible, the copy where it is.
struct ReachableCopy {
  fs::path path;
  bool bound = false;
  explicit ReachableCopy(const GitShieldState& s) : path(s.copy) {
    if (::geteuid() != 0 || s.owner_uid == 0) return;
    char tmpl[] = "/tmp/vibepit-bring-back-XXXXXX";
    if (!::mkdtemp(tmpl)) return;
    if (::chown(tmpl, s.owner_uid, s.owner_gid) == 0 &&
        ::mount(s.copy.c_str(), tmpl, nullptr, MS_BIND, nullptr) == 0) {
      path = tmpl;
      bound = true;
    } else {
      ::rmdir(tmpl);
    }
  }
  ~ReachableCopy() {
    if (!bound) return;
    ::umount2(path.c_str(), MNT_DETACH);
    ::rmdir(path.c_str());
  }
  ReachableCopy(const ReachableCopy&) = delete;
  ReachableCopy& operator=(const ReachableCopy&) = delete;
};

// Host git, in the project, as the owner of its git directory (never as root over a user's
// repository: what it writes there must stay theirs). Output and errors together.
struct HostGit {
  const GitShieldState& s;

  std::string run(std::vector<std::string> args, int& status) const {
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
  std::string must(std::vector<std::string> args) const {
    int status = 0;
    auto out = run(args, status);
    if (status != 0)
      throw std::runtime_error("git " + args.front() + " failed (" + std::to_string(status) +
                               "): " + out.substr(0, 400));
    return out;
  }
  std::map<std::string, std::string> refs(const std::string& prefix = "") const {
    std::map<std::string, std::string> out;
    std::vector<std::string> args = {"for-each-ref", "--format=%(objectname) %(refname)"};
    if (!prefix.empty()) args.push_back(prefix);
    std::istringstream in(must(args));
    std::string id, name;
    while (in >> id >> name) out[name] = id;
    return out;
  }
};

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

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o << text;
  o.close();
  if (!o) throw std::runtime_error("cannot write " + p.string());
}

void chown_tree(const fs::path& root, uid_t uid, gid_t gid) {
  if (::geteuid() != 0) return;
  (void)!::lchown(root.c_str(), uid, gid);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    (void)!::lchown(it->path().c_str(), uid, gid);
}

// Printable ASCII only: ref names and git's messages are shown on the user's terminal.
std::string shown(std::string_view s) {
  std::string out(s.substr(0, 300));
  for (char& c : out)
    if (c < 0x20 || c >= 0x7f) c = '?';
  return out;
}

// The session's copy made inert: every symlink and special file goes, and so does all that
// could name a program or point elsewhere (config, hooks, commondir, alternates, info,
// modules, worktrees, logs). What is left is objects and refs, which git verifies. The
// sandbox is gone by now, so nothing changes underneath. False when the copy is larger
// than a walk may be.
bool make_inert(const fs::path& copy, const fs::path& real_objects) {
  std::vector<fs::path> doomed;
  std::error_code ec;
  std::size_t seen = 0;
  for (auto it = fs::recursive_directory_iterator(copy, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++seen > kWalkLimit) return false;
    const auto st = it->symlink_status();
    if (!fs::is_directory(st) && !fs::is_regular_file(st)) doomed.push_back(it->path());
  }
  for (const auto& p : doomed) fs::remove(p, ec);
  for (const char* f :
       {"config", "config.worktree", "commondir", "gitdir", "hooks", "info", "modules", "worktrees",
        "logs", "objects/info/alternates", "objects/info/http-alternates"})
    fs::remove_all(copy / f, ec);
  write_file(copy / "config", "[core]\n\trepositoryformatversion = 0\n\tbare = true\n");
  fs::create_directories(copy / "objects" / "info");
  write_file(copy / "objects" / "info" / "alternates", real_objects.string() + "\n");
  return true;
}

}  // namespace

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

std::vector<std::string> bring_back_git(const GitShieldState& s, const std::string& session_id) {
  std::vector<std::string> out;
  if (s.kind == GitShieldState::Kind::none) return out;
  const fs::path git_dir = s.project / ".git";

  // A `.git` that appeared below the project during the session: out of git's sight, so that
  // no git run there (by a shell prompt on cd, or recursing into a submodule) uses it.
  bool complete = true;
  const auto now = nested_git_entries(s.project, complete);
  for (const auto& [rel, what] : now) {
    const auto was = s.nested.find(rel);
    if (was != s.nested.end() && was->second == what) continue;
    const fs::path p = s.project / rel;
    // A name the sandbox could not guess (it knows its session id), so it cannot have put
    // something there to make the rename fail.
    fs::path to = p;
    to += ".vibepit-quarantine-" + session_id + "-" + control::new_session_id().substr(0, 8);
    std::error_code ec;
    fs::rename(p, to, ec);
    out.push_back(std::string("! ") + (ec ? "could not move " : "moved ") + shown(rel) + ", " +
                  (was == s.nested.end() ? "made" : "changed") +
                  " in the session, out of git's sight" +
                  (ec ? ": " + ec.message() : " to " + shown(to.filename().string())) +
                  " (its config or hooks could run programs on this host; look before you "
                  "move it back)");
  }
  if (!complete)
    out.push_back("! the project has more than " + std::to_string(kWalkLimit) +
                  " entries; the rest were not searched for a .git the session made");
  if (s.kind != GitShieldState::Kind::directory) return out;
  // The sandbox never had them, so a change is yours or another program's: said loudly,
  // as the first thing to look at, and the session's work comes back all the same.
  if (fingerprint(git_dir) != s.fingerprint)
    out.push_back("! " + git_dir.string() +
                  ": its config or hooks changed during the session (not through the sandbox, "
                  "which never had them); check them");
  if (!make_inert(s.copy, git_dir / "objects")) {
    out.push_back(
        "! the session's git directory holds too many files; nothing was brought "
        "back. It is in " +
        s.copy.string());
    return out;
  }
  const HostGit git{s};
  const std::string ns = "refs/vibepit/sessions/" + session_id + "/";
  const ReachableCopy from(s);
  int status = 0;
  const std::string fetched = git.run({"-c",
                                       "protocol.file.allow=always",
                                       "-c",
                                       "safe.directory=" + from.path.string(),
                                       "-c",
                                       "gc.auto=0",
                                       "-c",
                                       "maintenance.auto=false",
                                       "-c",
                                       "fetch.fsckObjects=true",
                                       "-c",
                                       "fetch.recurseSubmodules=false",
                                       "fetch",
                                       "--quiet",
                                       "--no-tags",
                                       "--no-write-fetch-head",
                                       "--no-recurse-submodules",
                                       from.path.string(),
                                       "+refs/heads/*:" + ns + "heads/*",
                                       "+refs/tags/*:" + ns + "tags/*",
                                       "+refs/remotes/*:" + ns + "remotes/*"},
                                      status);
  if (status != 0) {
    out.push_back("! the session's commits could not be brought back (git fetch: " +
                  shown(fetched) + "); they are in " + s.copy.string());
    return out;
  }

  // Branches, tags and remote-tracking refs: moved where nobody moved them meanwhile.
  const auto session = git.refs(ns);
  const auto host = git.refs();
  std::set<std::string> seen;
  for (const auto& [vref, id] : session) {
    const std::string name = "refs/" + vref.substr(ns.size());
    seen.insert(name);
    const auto start = s.refs.find(name);
    const std::string was = start == s.refs.end() ? "" : start->second;
    const auto h = host.find(name);
    const std::string is = h == host.end() ? "" : h->second;
    if (id == was) {
      git.run({"update-ref", "-d", vref}, status);
      continue;
    }
    if (is != was) {
      out.push_back("! " + shown(name) + " moved here and in the session; the session's is " +
                    shown(vref));
      continue;
    }
    git.run({"update-ref", "-m", "vibepit session " + session_id, name, id,
             was},  // "" : the ref must not exist yet
            status);
    if (status == 0) {
      git.run({"update-ref", "-d", vref}, status);
      if (name.rfind("refs/remotes/", 0) != 0)
        out.push_back(shown(name) + (was.empty() ? " made: " : " moved: ") +
                      (was.empty() ? "" : was.substr(0, 12) + "..") + id.substr(0, 12));
    } else {
      out.push_back("! " + shown(name) + " could not be moved; the session's is " + shown(vref));
    }
  }
  for (const auto& [name, id] : s.refs)
    if ((name.rfind("refs/heads/", 0) == 0 || name.rfind("refs/tags/", 0) == 0) &&
        !seen.count(name))
      out.push_back(shown(name) + " was deleted in the session; it is kept here");

  // HEAD, and the index when nobody touched it here.
  const std::string head = small_file(s.copy / "HEAD", 4096);
  if (!head.empty() && head != s.head && small_file(git_dir / "HEAD", 4096) == s.head) {
    const std::string h = head.substr(0, head.find('\n'));
    if (h.rfind("ref: refs/heads/", 0) == 0)
      git.run({"symbolic-ref", "-m", "vibepit session " + session_id, "HEAD", h.substr(5)}, status);
    else
      git.run({"update-ref", "--no-deref", "HEAD", h}, status);
    out.push_back(status == 0 ? "HEAD is now " + shown(h) : "! HEAD could not follow the session");
  }
  const std::string index = small_file(s.copy / "index", std::size_t{1} << 30);
  if (!index.empty() && sha256_hex(index) != s.index) {
    if (sha256_hex(small_file(git_dir / "index", std::size_t{1} << 30)) == s.index) {
      const fs::path tmp = git_dir / "index.vibepit.tmp";
      write_file(tmp, index);
      if (::geteuid() == 0) (void)!::chown(tmp.c_str(), s.owner_uid, s.owner_gid);
      fs::rename(tmp, git_dir / "index");
    } else {
      out.push_back("! the index changed here and in the session; yours is kept");
    }
  }
  if (fingerprint(git_dir) != s.fingerprint)
    out.push_back("! " + git_dir.string() +
                  ": its config or hooks changed while the session's "
                  "commits were brought back; check them");
  return out;
}

void bring_back_git_and_say(const GitShieldState& s, const std::string& session_id,
                            const std::string& prefix, std::ostream& err) {
  std::vector<std::string> lines;
  try {
    // Once: a second bring-back would find every ref it moved "moved on both sides".
    std::error_code ec;
    if (!s.session_dir.empty()) {
      fs::rename(s.session_dir / "git-shield.json", s.session_dir / "git-shield.done.json", ec);
      if (ec) return;  // done already, or by another vibepit
    }
    if (const auto n = project_guard_refusals(s.session_dir))
      lines.push_back("! the sandbox was refused " + std::to_string(n) +
                      " attempt(s) to make or change a git repository in the project (" +
                      (s.session_dir / "project-guard.log").string() + ")");
    for (auto& l : bring_back_git(s, session_id)) lines.push_back(std::move(l));
  } catch (const std::exception& e) {
    lines.push_back("! the session's git directory was not brought back: " + shown(e.what()) +
                    "; it is in " + s.copy.string());
  }
  for (const auto& l : lines)
    err << prefix << (l.rfind("! ", 0) == 0 ? ": WARNING: " + l.substr(2) : ": git: " + l) << "\n";
}

void bring_back_git_of(const fs::path& session_dir, const std::string& session_id,
                       const std::string& prefix, std::ostream& err) {
  const std::string text = small_file(session_dir / "git-shield.json", 1 << 24);
  if (text.empty()) return;
  const auto j = Json::parse(text, nullptr, false);
  if (!j.is_object()) return;
  auto s = GitShieldState::from_json(j);
  s.session_dir = session_dir;  // where it is now, whatever it says
  bring_back_git_and_say(s, session_id, prefix, err);
}

}  // namespace vibepit::launcher
