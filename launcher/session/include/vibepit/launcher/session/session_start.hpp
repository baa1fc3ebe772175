#pragma once
// What `vibepit run` and `vibepit ci` share: from merged rules to a session whose proxy is
// ready and whose sandbox is created (not started), and the stream between the sandbox and
// this terminal.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "vibepit/docker/client.hpp"
#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/images/images.hpp"
#include "vibepit/launcher/rules/network_file.hpp"
#include "vibepit/launcher/session/agent_user.hpp"
#include "vibepit/launcher/session/session.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::launcher {

// The settings `vibepit run` and `vibepit ci` take alike.
struct SandboxSettings {
  std::string image;  // empty: the default sandbox image, built when missing
  std::string memory = "4g";
  double cpus = -1;                       // 0: no limit; below 0: default_cpus()
  std::vector<std::string> upstream_dns;  // empty: the host's resolvers
  std::filesystem::path upstream_ca;      // --upstream-ca: trusted for inspected upstreams
  std::vector<std::string> secrets;       // --secret texts (secrets.hpp reads their values)
  std::string egress_network;             // test-only (VIBEPIT_TEST_EGRESS_NETWORK)
  std::filesystem::path sessions_root;    // empty: $XDG_STATE_HOME/vibepit/sessions
  std::optional<AgentUser> user;          // --user; else agent_user.hpp's rule
  // Test-only (VIBEPIT_TEST_DECISION_RING, VIBEPIT_TEST_DECISION_LOG_MAX_BYTES): the
  // proxy's decision-ring and decision-log-max-bytes, so a test can make a ring evict or a
  // log rotate with a few hundred requests. 0: the proxy's defaults.
  std::uint64_t test_decision_ring = 0, test_log_max_bytes = 0;
};

// The sandbox's CPU limit unless --cpus says otherwise: the host's CPUs but one (at least
// one), so that an agent that keeps every core busy leaves the host, the launcher and the
// proxy a core of their own.
double default_cpus();

// "4g", "512m", "1073741824" -> bytes (SandboxSettings::memory); throws
// std::invalid_argument.
std::int64_t parse_memory(const std::string& text);

// SandboxSettings' test-only fields, from the environment (see there).
void apply_test_settings(SandboxSettings& s);

struct SessionRequest {
  Project project;
  NetworkFile rules;  // merged and canonical (presets expanded)
  std::vector<std::string> command;
  bool tty = false;
  bool stdin_open = true;  // attach the sandbox's stdin (vibepit ci: no)
  SandboxSettings sandbox;
  policy::Mode mode = policy::Mode::enforce;
  std::uint64_t ask_timeout_ms = 0;  // vibepit run --ask: hold denied requests this long; 0: off
  SessionSpec::Home home = SessionSpec::Home::project;
  std::string home_cache_key;  // Home::cache
  // --secret: handed to the proxy at start; the caller may drop them once it has started.
  std::vector<SessionSecret> secrets;
};

struct StartedSession {
  SessionSpec spec;
  std::string control;  // the control API on the host, "127.0.0.1:PORT"
  std::string proxy_id, sandbox_id;
};

// Images (built when missing), the session directory and credentials, the networks, the
// proxy (ready), the client set, and the sandbox (created). `on_id` is called with the
// session id before anything of the session exists, so a signal handler can remove it by
// label; `after_step` after "network", "proxy" and "sandbox".
StartedSession start_session(docker::Client& docker, const SessionRequest& req,
                             const Report& report,
                             const std::function<void(const std::string&)>& on_id,
                             const std::function<void(const char*)>& after_step);

// The host's resolvers for the proxy. A loopback resolver cannot be reached from the proxy
// container: that is an error that says so and names --upstream-dns.
std::vector<std::string> host_resolvers(const Report& report);

// Copy the sandbox's output to stdout (TTY) or, demultiplexed, to stdout and stderr, until
// the stream ends. With `forward_stdin`, a thread copies stdin to the sandbox.
void pump(const docker::Hijacked& h, bool tty, bool forward_stdin);

std::string now_rfc3339();  // UTC, seconds

}  // namespace vibepit::launcher
