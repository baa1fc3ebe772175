// Removing a session by its label: containers, its own home volume, networks, the FORWARD
// rule of its bridge, and last the project's filter.
#include <chrono>
#include <string_view>
#include <thread>

#include "session_roles.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/session/bridge_rule.hpp"
#include "vibepit/launcher/session/session.hpp"

namespace vibepit::launcher {
using docker::Json;

std::vector<std::string> remove_session(docker::Client& docker, const std::string& session_id) {
  std::vector<std::string> problems;
  const std::string sel = std::string(docker::label::kSession) + "=" + session_id;
  // Gone already, or being removed by another vibepit (run's own cleanup racing `down`):
  // both leave nothing behind, so neither is a problem.
  auto settled = [](const docker::DockerError& e) {
    return e.kind() == docker::ErrorKind::not_found ||
           std::string_view(e.what()).find("already in progress") != std::string_view::npos;
  };
  auto attempt = [&](auto&& fn, const std::string& what) {
    try {
      fn();
    } catch (const docker::DockerError& e) {
      if (!settled(e)) problems.push_back(what + ": " + e.what());
    }
  };
  std::vector<Json> containers;
  attempt([&] { containers = docker.containers_by_label(sel); }, "listing containers");
  for (const auto& c : containers) {
    const std::string id = c.value("Id", "");
    attempt([&] { docker.container_remove(id, true); }, "removing container " + id.substr(0, 12));
  }
  // The session's own home volume (vibepit ci); the project's home and caches carry the
  // label of the session that made them, and stay.
  std::vector<Json> volumes;
  attempt([&] { volumes = docker.volumes_by_label(sel); }, "listing volumes");
  for (const auto& v : volumes) {
    if (!v.contains("Labels") || !v["Labels"].is_object() ||
        v["Labels"].value(docker::label::kRole, "") != kRoleSessionHome)
      continue;
    const std::string name = v.value("Name", "");
    attempt([&] { docker.volume_remove(name); }, "removing volume " + name);
  }
  std::vector<Json> networks;
  attempt([&] { networks = docker.networks_by_label(sel); }, "listing networks");
  for (const auto& n : networks) {
    const std::string id = n.value("Id", "");
    // A container another process is still removing keeps its endpoint for a moment.
    for (int tries = 0;; ++tries) {
      try {
        docker.network_remove(id);
        break;
      } catch (const docker::DockerError& e) {
        if (settled(e)) break;
        const bool busy =
            std::string_view(e.what()).find("active endpoints") != std::string_view::npos;
        if (!busy || tries == 50) {
          problems.push_back("removing network " + n.value("Name", id) + ": " + e.what());
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  if (docker.traits().internal_bridge_needs_forward_rule)
    for (auto& p : remove_bridge_rules(session_id)) problems.push_back(std::move(p));
  // Last, once the sandbox is gone: the project's filter, whose server then ends.
  if (auto p = stop_project_guard(session_id); !p.empty()) problems.push_back(p);
  return problems;
}

}  // namespace vibepit::launcher
