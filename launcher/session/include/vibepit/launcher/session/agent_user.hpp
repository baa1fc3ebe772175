#pragma once
// Who the agent runs as (docs/security.md, "Whose files"). The agent writes the project, so
// it runs as the project's owner: every file it makes is theirs on the host, and none is
// ever root's. vibepit run by an ordinary user runs the agent as that user (the project
// filter, which writes for the agent, cannot become anyone else). Run as root (sudo, a
// root CI runner), it takes the project directory's owner, or --user. The agent never runs
// as root: a root-owned project without --user, and --user 0, are refused before anything
// is made. A rootless engine (Podman) runs containers in its user's namespace: the agent
// can then only be that user, mapped to itself, for its files to be that user's.

#include <sys/types.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "vibepit/docker/client.hpp"

namespace vibepit::launcher {

struct AgentUser {
  uid_t uid = 0;
  gid_t gid = 0;
  bool operator==(const AgentUser&) const = default;
};

// --user's value: "UID" or "UID:GID", decimal numbers below 2^32 - 1 (GID defaults to UID).
// Throws std::invalid_argument saying what is wrong. 0 parses: choose_agent_user refuses it
// with the explanation.
AgentUser parse_user_option(const std::string& text);

// A user the agent must not run as, or cannot: what() says why and the ways out.
class AgentUserRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AgentUserFacts {
  uid_t invoker_uid = 0;  // vibepit's own (getuid)
  gid_t invoker_gid = 0;
  uid_t owner_uid = 0;  // the project directory's
  gid_t owner_gid = 0;
  std::string project;                 // its path, for the messages
  std::optional<AgentUser> requested;  // --user
};

// The rule above, as a pure function of the facts; throws AgentUserRefused.
AgentUser choose_agent_user(const AgentUserFacts& facts);

// The facts for `project` as this process sees them (stat, getuid); throws
// std::runtime_error when the project cannot be examined.
AgentUserFacts agent_user_facts(const std::string& project, std::optional<AgentUser> requested);

// Whether `engine` can run the agent as `agent` with the agent's files theirs on the host:
// any rootful engine can; a rootless one only as the user it runs as, and only where it can
// map that user to itself (Podman's keep-id; rootless Docker cannot). Throws
// AgentUserRefused saying what is missing and the ways out.
void check_engine_keeps_ids(const docker::VersionInfo& engine, const docker::EngineTraits& traits,
                            const AgentUser& agent);

// The HostConfig.UsernsMode a session's containers get on `docker`'s engine: the mode that
// keeps ids when the engine is rootless, else nullptr (the engine's default).
const char* rootless_userns(const docker::Client& docker);

}  // namespace vibepit::launcher
