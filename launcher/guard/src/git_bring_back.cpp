// The project's git directory after the session (git_shield.hpp): the session's copy made
// inert, its objects and refs fetched by host git, refs moved where nobody moved them, and
// `.git` entries that appeared below the project put out of git's sight.
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <ostream>
#include <set>
#include <stdexcept>

#include "git_detail.hpp"
#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/guard/git_shield.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/host/sha256.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using namespace git_detail;
using Json = nlohmann::json;
namespace {

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
      out.emplace_back("! the index changed here and in the session; yours is kept");
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
