#pragma once
// The project's .git, out of the sandbox's reach (docs/security.md, "The project's git").
//
// Git on the host runs programs that a repository names: core.fsmonitor, core.hooksPath,
// filters, core.sshCommand, hooks, and a `commondir` file that points the repository's
// config somewhere else. Whatever the sandbox could write into the project's git directory
// would run on the host with the user's rights, the moment their shell prompt runs
// `git status`. Mounting config and hooks read-only is not enough (commondir, a new
// config.worktree with the extension already set, a gitfile rewritten), so the sandbox
// never gets the project's git directory at all:
//
// - At the start it gets a copy made for the session and mounted at PROJECT/.git: HEAD,
//   refs, the index, and a config holding only the keys that say where things are
//   (remotes without credentials, branches, the object format, the committer), nothing that
//   runs; no hooks; the project's objects, read-only, as an alternate.
// - At the end the copy is made inert (every link, config, hook and pointer elsewhere goes),
//   and only objects and refs come back, through `git fetch` run on the host in the
//   project, which verifies every object. A branch moves only if nobody moved it during the
//   session; otherwise the session's version stays under refs/vibepit/sessions/ID/.
// - A project whose .git is a file (a linked worktree or a submodule checkout) gets that
//   file read-only, and no git in the sandbox. So does a project whose git directory host
//   git cannot read (no git installed, another owner): an empty .git, and a warning.
// - The project's config and hooks are compared with what they were at the start, and a
//   `.git` below the project that appeared or changed during the session is renamed out of
//   git's sight. (The sandbox cannot make one: it sees the project through
//   project_guard.hpp's filter. A change made on the host meanwhile can.)
#include <sys/types.h>

#include <filesystem>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vibepit::launcher {

// The config the sandbox's copy gets, from `git config --null --list` of the project's own
// (entries "key\nvalue\0"): the keys on an allowlist, with credentials taken out of URLs.
// Pure.
std::string sandbox_git_config(const std::string& null_list);

// "https://user:token@host/x" -> "https://host/x"; anything without userinfo as it is.
std::string without_userinfo(const std::string& url);

struct GitShieldState {
  // hidden: a .git directory that host git could not read; the sandbox gets an empty one.
  enum class Kind { none, directory, gitfile, hidden };
  Kind kind = Kind::none;
  std::filesystem::path project;      // the work tree's root
  std::filesystem::path session_dir;  // where git-shield.json keeps this state
  std::filesystem::path copy;         // SESSION/git, mounted at PROJECT/.git (Kind::directory)
  std::string head;                   // HEAD at the start (its file's content)
  std::map<std::string, std::string> refs;  // refs at the start: name -> object id
  std::string fingerprint;                  // config and hooks at the start
  std::string index;                        // the index file's fingerprint at the start
  // `.git` entries below the root at the start, each with what host git would take from it
  // (a gitfile's content; a directory's config, hooks and commondir).
  std::map<std::string, std::string> nested;
  uid_t owner_uid = 0;  // the project's .git belongs to them: host git runs as them
  gid_t owner_gid = 0;
  std::string why_hidden;  // Kind::hidden: what went wrong

  nlohmann::json to_json() const;
  static GitShieldState from_json(const nlohmann::json& j);
};

// Before the sandbox is made: the copy (owned by uid:gid, the sandbox's user) and the state
// to bring it back with. Kind::none for a project without git.
GitShieldState shield_git(const std::filesystem::path& project,
                          const std::filesystem::path& session_dir, uid_t uid, gid_t gid);

// The sandbox's mounts for it (Docker's Mounts entries).
std::vector<nlohmann::json> git_mounts(const GitShieldState& s);

// After the sandbox is gone: bring the session's objects and refs back, check the project's
// config and hooks, and put new `.git` entries out of sight. Lines for the user; those
// starting with "!" are warnings to show loudly.
std::vector<std::string> bring_back_git(const GitShieldState& s, const std::string& session_id);

// bring_back_git() for a session that is over, once (its git-shield.json is renamed
// git-shield.done.json first), its lines printed to `err` after `prefix` ("vibepit"),
// warnings marked. Never throws: a failure is one more warning.
void bring_back_git_and_say(const GitShieldState& s, const std::string& session_id,
                            const std::string& prefix, std::ostream& err);

// The same for a session whose vibepit run is gone (killed): from the state its directory
// keeps, when it has not been done. For `vibepit down` and `vibepit prune`.
void bring_back_git_of(const std::filesystem::path& session_dir, const std::string& session_id,
                       const std::string& prefix, std::ostream& err);

}  // namespace vibepit::launcher
