// Removing a session by its label: containers, its own home volume, networks, the FORWARD
// rule of its bridge, and last the project's filter.
#include <chrono>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>

#include "session_roles.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/session/bridge_rule.hpp"
#include "vibepit/launcher/session/session.hpp"

namespace vibepit::launcher {
using docker::Json;
namespace {

// fn(client, item) for every item at once, each on a thread with a client of its own: the
// engine takes its time over each removal (a container's stop, a bridge's teardown), and
// they do not depend on one another.
template <typename Fn>
void at_once(const docker::Client& docker, const std::vector<Json>& items, Fn fn) {
  std::vector<std::thread> threads;
  threads.reserve(items.size());
  for (const auto& item : items)
    threads.emplace_back([&fn, &item, client = docker]() mutable { fn(client, item); });
  for (auto& t : threads) t.join();
}

}  // namespace

std::vector<std::string> remove_session(docker::Client& docker, const std::string& session_id) {
  std::vector<std::string> problems;
  const std::string sel = std::string(docker::label::kSession) + "=" + session_id;
  // Gone already, or being removed by another vibepit (run's own cleanup racing `down`):
  // both leave nothing behind, so neither is a problem.
  auto settled = [](const docker::DockerError& e) {
    return e.kind() == docker::ErrorKind::not_found ||
           std::string_view(e.what()).find("already in progress") != std::string_view::npos;
  };
  std::mutex problems_mu;  // the removals at once add to it
  auto problem = [&](std::string p) {
    std::lock_guard lock(problems_mu);
    problems.push_back(std::move(p));
  };
  auto attempt = [&](auto&& fn, const std::string& what) {
    try {
      fn();
    } catch (const docker::DockerError& e) {
      if (!settled(e)) problem(what + ": " + e.what());
    } catch (const std::exception& e) {
      problem(what + ": " + e.what());
    }
  };
  std::vector<Json> containers;
  attempt([&] { containers = docker.containers_by_label(sel); }, "listing containers");
  at_once(docker, containers, [&](docker::Client& client, const Json& c) {
    const std::string id = c.value("Id", "");
    attempt([&] { client.container_remove(id, true); }, "removing container " + id.substr(0, 12));
  });
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
  at_once(docker, networks, [&](docker::Client& client, const Json& n) {
    const std::string id = n.value("Id", "");
    // A container another process is still removing keeps its endpoint for a moment.
    for (int tries = 0;; ++tries) {
      try {
        client.network_remove(id);
        break;
      } catch (const docker::DockerError& e) {
        if (settled(e)) break;
        const bool busy =
            std::string_view(e.what()).find("active endpoints") != std::string_view::npos;
        if (!busy || tries == 50) {
          problem("removing network " + n.value("Name", id) + ": " + e.what());
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      } catch (const std::exception& e) {
        problem("removing network " + n.value("Name", id) + ": " + e.what());
        break;
      }
    }
  });
  if (docker.traits().internal_bridge_needs_forward_rule)
    for (auto& p : remove_bridge_rules(session_id)) problems.push_back(std::move(p));
  // Last, once the sandbox is gone: the project's filter, whose server then ends.
  if (auto p = stop_project_guard(session_id); !p.empty()) problems.push_back(p);
  return problems;
}

}  // namespace vibepit::launcher
