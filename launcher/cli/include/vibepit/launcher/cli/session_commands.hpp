#pragma once
// `vibepit sessions`, `vibepit down`, `vibepit prune`: sessions as Docker knows them, by label.
#include <filesystem>
#include <iosfwd>
#include <map>
#include <string>

#include "vibepit/docker/client.hpp"

namespace vibepit::launcher {

// One session's objects on the Docker engine.
struct DockerSession {
  std::string id;
  std::string project_hash;
  std::string proxy_state;    // "running", "exited", ... or "" when there is no proxy container
  std::string sandbox_state;  // the same for the sandbox
  int networks = 0;
};

// Every session that has a container or a network labelled dev.vibepit.session, by id.
std::map<std::string, DockerSession> docker_sessions(docker::Client& docker);

// A session's state in words: "running", "proxy stopped: no egress", "sandbox exited", ...
std::string describe(const DockerSession& s);

// Whether the vibepit run that owns session `id` is still alive (its session.json's pid).
bool launcher_alive(const std::filesystem::path& sessions_root, const std::string& id);

int cmd_sessions(const std::filesystem::path& sessions_root, bool json, std::ostream& out,
                 std::ostream& err);
// Remove the sessions of the project at `path` (or the session `id`): containers and
// networks. The home volume and the session directory (its decision log) stay.
int cmd_down(const std::filesystem::path& path, const std::string& id, std::ostream& out,
             std::ostream& err);
// Remove what sessions whose vibepit run is gone left behind (all sessions with `all`).
int cmd_prune(const std::filesystem::path& sessions_root, bool all, std::ostream& out,
              std::ostream& err);

}  // namespace vibepit::launcher
