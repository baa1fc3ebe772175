#include "vibepit/launcher/cli/session_commands.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"

#include <signal.h>

#include <cerrno>
#include <iomanip>
#include <ostream>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/cli/engine.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"
#include "vibepit/launcher/guard/git_shield.hpp"
#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/session/bridge_rule.hpp"
#include "vibepit/launcher/session/session.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using docker::Json;

namespace {

fs::path root_or_default(const fs::path& root) {
  return root.empty() ? control::default_sessions_root() : root;
}

std::string label_of(const Json& o, const char* key) {
  if (!o.contains("Labels") || !o["Labels"].is_object()) return {};
  return o["Labels"].value(key, "");
}

std::string project_of(const fs::path& root, const std::string& id) {
  try {
    return control::read_client_set(root / id).info.project;
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

std::map<std::string, DockerSession> docker_sessions(docker::Client& docker) {
  std::map<std::string, DockerSession> out;
  for (const auto& c : docker.containers_by_label(docker::label::kSession)) {
    const std::string id = label_of(c, docker::label::kSession);
    auto& s = out[id];
    s.id = id;
    s.project_hash = label_of(c, docker::label::kProject);
    const std::string role = label_of(c, docker::label::kRole);
    (role == "proxy" ? s.proxy_state : s.sandbox_state) = c.value("State", "unknown");
  }
  for (const auto& n : docker.networks_by_label(docker::label::kSession)) {
    const std::string id = label_of(n, docker::label::kSession);
    auto& s = out[id];
    s.id = id;
    if (s.project_hash.empty()) s.project_hash = label_of(n, docker::label::kProject);
    ++s.networks;
  }
  return out;
}

std::string describe(const DockerSession& s) {
  if (s.proxy_state == "running" && s.sandbox_state == "running") return "running";
  if (s.sandbox_state == "running")
    return "proxy " + (s.proxy_state.empty() ? std::string("gone") : s.proxy_state) +
           ": the sandbox has no egress";
  if (!s.sandbox_state.empty()) return "sandbox " + s.sandbox_state;
  if (!s.proxy_state.empty()) return "starting (proxy " + s.proxy_state + ")";
  return "networks only";
}

bool launcher_alive(const fs::path& sessions_root, const std::string& id) {
  try {
    const auto pid = control::read_client_set(root_or_default(sessions_root) / id).info.pid;
    return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  } catch (const std::exception&) {
    return false;  // no session directory: nothing owns it
  }
}

int cmd_sessions(const fs::path& sessions_root, bool json, std::ostream& out, std::ostream& err) {
  return with_docker("sessions", err, [&](docker::Client& docker) {
    const fs::path root = root_or_default(sessions_root);
    Json rows = Json::array();
    for (const auto& [id, s] : docker_sessions(docker)) {
      rows.push_back({{"id", id},
                      {"project", project_of(root, id)},
                      {"project_hash", s.project_hash},
                      {"state", describe(s)},
                      {"proxy", s.proxy_state},
                      {"sandbox", s.sandbox_state},
                      {"attached", launcher_alive(root, id)}});
    }
    if (json) {
      out << rows.dump(2) << "\n";
      return kOk;
    }
    if (rows.empty()) {
      err << "vibepit: no sessions\n";
      return kOk;
    }
    out << std::left << std::setw(14) << "SESSION" << std::setw(10) << "ATTACHED" << std::setw(32)
        << "PROJECT"
        << " STATE\n";
    for (const auto& r : rows)
      out << std::left << std::setw(14) << r["id"].get<std::string>() << std::setw(10)
          << (r["attached"] ? "yes" : "no") << std::setw(32) << r["project"].get<std::string>()
          << " " << r["state"].get<std::string>() << "\n";
    return kOk;
  });
}

int cmd_down(const fs::path& path, const std::string& id, std::ostream& out, std::ostream& err) {
  return with_docker("down", err, [&](docker::Client& docker) {
    std::vector<std::string> ids;
    std::string what;
    if (!id.empty()) {
      ids.push_back(id);
      what = "session " + id;
    } else {
      const char* home = std::getenv("HOME");
      const Project project = resolve_project(path, home ? home : "");
      what = "project " + project.root.string();
      for (const auto& [sid, s] : docker_sessions(docker))
        if (s.project_hash == project.hash) ids.push_back(sid);
    }
    if (ids.empty() || (!id.empty() && !docker_sessions(docker).count(id))) {
      err << "vibepit: down: no session for " << what << "\n";
      return kNoSession;
    }
    int failed = 0;
    for (const auto& sid : ids) {
      auto problems = remove_session(docker, sid);
      for (const auto& p : problems) err << "vibepit: down: " << p << "\n";
      failed += problems.empty() ? 0 : 1;
      if (problems.empty()) out << "removed session " << sid << "\n";
      // A vibepit run still attached brings its session's git back itself; else it is done
      // here.
      if (problems.empty() && !launcher_alive({}, sid))
        bring_back_git_of(root_or_default({}) / sid, sid, "vibepit", err);
    }
    return failed ? kRefused : kOk;
  });
}

int cmd_prune(const fs::path& sessions_root, bool all, std::ostream& out, std::ostream& err) {
  return with_docker("prune", err, [&](docker::Client& docker) {
    int failed = 0, removed = 0;
    for (const auto& [id, s] : docker_sessions(docker)) {
      if (!all && launcher_alive(sessions_root, id)) continue;
      auto problems = remove_session(docker, id);
      for (const auto& p : problems) err << "vibepit: prune: " << p << "\n";
      if (problems.empty()) {
        out << "removed session " << id << " (" << describe(s) << ")\n";
        bring_back_git_of(root_or_default(sessions_root) / id, id, "vibepit", err);
        ++removed;
      } else {
        ++failed;
      }
    }
    // A project filter left mounted with nothing of its session on the engine (its vibepit
    // run was killed between removing the containers and unmounting it).
    const auto live = docker_sessions(docker);
    for (const auto& id : mounted_project_guards()) {
      if (live.count(id) || (!all && launcher_alive(sessions_root, id))) continue;
      if (auto p = stop_project_guard(id); !p.empty()) {
        err << "vibepit: prune: " << p << "\n";
        ++failed;
      } else {
        out << "unmounted the project view of session " << id << "\n";
        ++removed;
      }
    }
    // FORWARD rules of sessions with nothing left on the engine.
    if (docker.traits().internal_bridge_needs_forward_rule) {
      std::vector<std::string> keep;
      keep.reserve(live.size());
      for (const auto& [id, s] : live) keep.push_back(id);
      std::vector<std::string> gone;
      for (const auto& p : remove_bridge_rules("", keep, &gone)) {
        err << "vibepit: prune: " << p << "\n";
        ++failed;
      }
      for (const auto& id : gone) out << "removed the FORWARD rule of session " << id << "\n";
      removed += static_cast<int>(gone.size());
    }
    if (removed == 0 && failed == 0) out << "nothing to prune\n";
    return failed ? kRefused : kOk;
  });
}

}  // namespace vibepit::launcher
