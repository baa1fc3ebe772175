#include "vibepit/launcher/session/agent_user.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <string_view>

namespace vibepit::launcher {
namespace {

// A decimal id: digits only, below (id_t)-1, which the kernel reserves for "no change".
std::optional<std::uint32_t> parse_id(std::string_view s) {
  std::uint32_t v = 0;
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() ||
      v == std::numeric_limits<std::uint32_t>::max())
    return std::nullopt;
  return v;
}

std::string ids(uid_t uid, gid_t gid) {
  return std::to_string(uid) + ":" + std::to_string(gid);
}

// The ways out of a project the agent would otherwise run as root on.
std::string ways_out(const std::string& project) {
  return "give the project to an ordinary user and run the agent as them: "
         "`chown -R UID:GID " +
         project +
         "` and then `vibepit ... --user UID:GID` (as root), or run vibepit as that user "
         "(docs/ci.md has recipes for CI runners that run as root)";
}

}  // namespace

AgentUser parse_user_option(const std::string& text) {
  const auto colon = text.find(':');
  const std::string_view all(text);
  const auto uid = parse_id(all.substr(0, colon));
  const auto gid = colon == std::string::npos ? uid : parse_id(all.substr(colon + 1));
  if (!uid || !gid)
    throw std::invalid_argument("\"" + text.substr(0, 40) +
                                "\": expected UID or UID:GID, decimal numbers (names are not "
                                "looked up: the sandbox has its own /etc/passwd)");
  return {*uid, *gid};
}

AgentUser choose_agent_user(const AgentUserFacts& f) {
  if (f.requested) {
    const AgentUser& r = *f.requested;
    if (r.uid == 0 || r.gid == 0)
      throw AgentUserRefused("--user " + ids(r.uid, r.gid) +
                             ": the agent never runs as root or in root's group; " +
                             ways_out(f.project));
    if (f.invoker_uid != 0 && r.uid != f.invoker_uid)
      throw AgentUserRefused("--user " + ids(r.uid, r.gid) + ": vibepit runs as uid " +
                             std::to_string(f.invoker_uid) +
                             " and can run the agent only as that uid (the project filter "
                             "writes for the agent as vibepit's own user); run vibepit as "
                             "root to choose another");
    return r;
  }
  if (f.invoker_uid != 0) return {f.invoker_uid, f.invoker_gid};
  if (f.owner_uid == 0 || f.owner_gid == 0)
    throw AgentUserRefused("the project " + f.project + " is owned by " +
                           ids(f.owner_uid, f.owner_gid) +
                           ", and the agent, which runs as the project's owner, never runs as "
                           "root or in root's group: " +
                           ways_out(f.project));
  return {f.owner_uid, f.owner_gid};
}

void check_engine_keeps_ids(const docker::VersionInfo& engine, const docker::EngineTraits& traits,
                            const AgentUser& agent) {
  if (!engine.rootless) return;
  const std::string which = "rootless " + std::string(docker::to_string(engine.engine)) + " at " +
                            engine.socket + " (uid " + std::to_string(engine.socket_uid) + ")";
  if (*traits.rootless_userns_keeping_ids == '\0')
    throw AgentUserRefused(
        which +
        " cannot map the agent's user to itself, so the agent's files would belong to a "
        "subordinate uid, not to the project's owner. Use rootful Docker, or Podman (rootless, "
        "or as root with DOCKER_HOST=unix:///run/podman/podman.sock)");
  if (agent.uid != engine.socket_uid)
    throw AgentUserRefused(which +
                           " can run the agent as its own user only (its files would belong to a "
                           "subordinate uid otherwise), and the agent would be " +
                           ids(agent.uid, agent.gid) + ": run vibepit as uid " +
                           std::to_string(engine.socket_uid) +
                           " on a project it owns, or use a rootful engine");
}

const char* rootless_userns(const docker::Client& docker) {
  const char* mode = docker.traits().rootless_userns_keeping_ids;
  return docker.version().rootless && *mode != '\0' ? mode : nullptr;
}

AgentUserFacts agent_user_facts(const std::string& project, std::optional<AgentUser> requested) {
  struct stat st {};
  if (::stat(project.c_str(), &st) != 0)
    throw std::runtime_error("cannot examine the project " + project + ": " + std::strerror(errno));
  AgentUserFacts f;
  f.invoker_uid = ::getuid();
  f.invoker_gid = ::getgid();
  f.owner_uid = st.st_uid;
  f.owner_gid = st.st_gid;
  f.project = project;
  f.requested = requested;
  return f;
}

}  // namespace vibepit::launcher
