#pragma once
// The project as the sandbox sees it: the real directory, through a filter (FUSE) that keeps
// the agent from making a git repository anywhere in it (docs/security.md, "The project's
// git").
//
// Git on the host finds a repository in every directory it runs in: a `.git` there, or the
// directory itself when it holds HEAD with objects/ and refs/ (or with commondir). Whatever
// the agent could put there (core.fsmonitor, core.hooksPath, a hook) would run with the
// user's rights the moment a shell prompt runs `git status` in that directory, and the user
// is there while the session is live. Renaming such repositories at the end is too late,
// and watching for them races the prompt; so the sandbox gets the project through a
// filesystem of our own that refuses, before anything is written:
//
// - an entry named `.git` (in any case) anywhere: mkdir, create, mknod, symlink, link or
//   rename to it;
// - a change below a `.git` that was there before (a nested clone's config, a hook);
// - a directory coming to hold HEAD together with objects and refs, or with commondir (a
//   bare repository, which git finds without any `.git`), and a change inside a directory
//   that already is one or inside its hooks/.
//
// The project's own .git is not seen through the filter: the sandbox gets git_shield.hpp's
// copy, mounted over it. Everything else is passed through as it is, as the agent's user,
// without following a symlink the agent may have swapped in.
#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::launcher {

// ---- The rules (pure, over directory descriptors) ----

// ".git" in any case: what git (and, on a case-insensitive filesystem, its host) takes for
// a repository's entry.
bool is_git_name(std::string_view name);

// Does the directory `dirfd` hold what makes git take it for a git directory (HEAD with
// objects and refs, or HEAD with commondir), counting `adding` as present too?
bool is_git_dir(int dirfd, std::string_view adding = {});

enum class GuardRefusal {
  none,
  git_name,       // an entry named .git
  inside_git,     // below a .git, or inside a git directory or its hooks/
  makes_git_dir,  // the directory would become a git directory
};
const char* describe(GuardRefusal r);

// Opens `path` (relative to `root`, "" for the root itself) with `flags`, beneath the root
// and without following any symlink on the way or at the end. -1 with errno on failure.
int open_beneath(int root, std::string_view path, int flags, mode_t mode = 0);

// The checks, for a path relative to the project's root ("a/b/c"; "" is the root), with
// `root` a descriptor of the root. Symlinks are never followed: a component that is not a
// directory counts as absent. `parent`, when the caller has it open already, is the
// directory above path's last component (else it is opened here).
GuardRefusal check_create(int root, std::string_view path, int parent = -1);  // path is new
// path's entry changes or goes
GuardRefusal check_change(int root, std::string_view path, int parent = -1);

// ---- The filter process ----

struct GuardOptions {
  std::filesystem::path project;     // the real directory
  std::filesystem::path mountpoint;  // where the filtered view appears
  std::string session_id;            // names the mount: vibepit-guard:ID
  uid_t uid = 0;                     // the sandbox's user: every operation is made as them
  gid_t gid = 0;
  std::filesystem::path log;  // refusals, one line each (bounded)
};

// `vibepit __project-guard`: mounts the view, then serves it from a process of its own that
// outlives the caller (a `vibepit run` killed with SIGKILL leaves a sandbox that still works
// until `vibepit prune`). Returns once the view is mounted (0) or could not be (1, with the
// reason on stderr). The server ends when the view is unmounted.
int project_guard_main(const GuardOptions& o);

// ---- The launcher's side ----

// Starts the filter for a session: the view is SESSION_DIR/project. Throws
// std::runtime_error with what went wrong (no /dev/fuse, FUSE refused allow_other, ...).
std::filesystem::path start_project_guard(const std::filesystem::path& project,
                                          const std::filesystem::path& session_dir,
                                          const std::string& session_id, uid_t uid, gid_t gid);

// Unmounts the session's view, found in this mount namespace by its name; the server then
// ends. Nothing to do when there is none. Returns a problem, or empty.
std::string stop_project_guard(const std::string& session_id);

// The sessions whose views are mounted here.
std::vector<std::string> mounted_project_guards();

// A rootless engine runs in a mount namespace of its own, made when it started: a mount made
// later reaches it only when made under a shared mount. The mount point of the mount that
// holds `path` (absolute) when that mount is not shared, per `mountinfo`
// (/proc/self/mountinfo's text); empty when it is shared.
std::string private_mount_holding(std::string_view mountinfo, const std::filesystem::path& path);
// The same, for this process's mounts.
std::string private_mount_holding(const std::filesystem::path& path);

// How many refusals the session's filter logged (SESSION_DIR/project-guard.log).
std::size_t project_guard_refusals(const std::filesystem::path& session_dir);

}  // namespace vibepit::launcher
