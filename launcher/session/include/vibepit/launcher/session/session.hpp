#pragma once
// One vibepit session on a Docker engine: an internal session network, the proxy container
// dual-homed on it and on an egress network, and the sandbox container behind it. Every
// object carries dev.vibepit.session/project/role labels; removal goes by those labels.
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "vibepit/control/credentials.hpp"
#include "vibepit/docker/client.hpp"
#include "vibepit/launcher/guard/git_shield.hpp"
#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/images/images.hpp"
#include "vibepit/launcher/session/secrets.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::launcher {

struct SessionSpec {
  std::string id;
  Project project;
  std::filesystem::path dir;  // $XDG_STATE_HOME/vibepit/sessions/<id>
  std::vector<std::string> allow_http, allow_dns;
  policy::Mode mode = policy::Mode::enforce;  // the proxy's mode (vibepit ci --mode audit)
  // Ask mode (vibepit run --ask): the proxy holds a request that no rule allows for up to
  // this long, for the user to allow (vibepit monitor); 0: off.
  std::uint64_t ask_timeout_ms = 0;
  std::string proxy_image;
  std::string sandbox_image;
  bool default_image = true;  // the image has the user `code` and /home/code
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<std::string> command;  // empty: the image's default (a login shell)
  bool tty = false;
  bool stdin_open = true;                 // the sandbox's stdin is attached (vibepit ci: not)
  std::int64_t memory = 4LL << 30;        // bytes
  double cpus = 0;                        // 0: no limit (SandboxSettings: default_cpus())
  std::vector<std::string> upstream_dns;  // ADDR[:PORT]
  // A PEM bundle the proxy trusts for inspected upstreams beside the host's system CAs.
  std::filesystem::path upstream_ca;
  std::string subnet_pool = "10.219.0.0/16";
  // Test-only: an existing network (e.g. the test's fake internet) as the egress network.
  std::string egress_network;
  // Where the sandbox's home comes from: the project's volume, kept from session to session
  // (vibepit run); a volume of this session's own, removed with it, so nothing one CI job
  // writes there reaches the next (vibepit ci); or a cache named by a key, kept for the next
  // job that names it (vibepit ci --cache-home KEY).
  enum class Home { project, session, cache };
  Home home = Home::project;
  std::string home_cache_key;  // Home::cache: [A-Za-z0-9._-], 1 to 64 characters
  GitShieldState git;          // the project's .git, kept from the sandbox (git_shield.hpp)
  // Where the sandbox's project comes from: the filter's view (project_guard.hpp), mounted
  // at the project's own path in the sandbox. Empty: the project itself.
  std::filesystem::path project_view;
  // The proxy's decision-ring and decision-log-max-bytes; 0 leaves its defaults.
  std::uint64_t decision_ring = 0, decision_log_max_bytes = 0;
  // The names of the session's credentials (--secret): the sandbox gets NAME set to a
  // placeholder. Their values never enter the spec.
  std::vector<std::string> secret_names;
};

// What --cache-home takes: 1 to 64 of [A-Za-z0-9._-]. Throws std::invalid_argument.
void check_cache_key(const std::string& key);

inline constexpr int kProxyPort = 3128;

class Session {
 public:
  Session(docker::Client& docker, SessionSpec spec, Report report);

  void create_networks();
  // The CA bundles in the session directory, before the proxy starts and the sandbox is
  // made: the proxy's for upstreams (the host's system CAs and --upstream-ca), and the
  // sandbox's, which start_proxy completes with the inspection CA once the proxy made it.
  void prepare_ca_bundles();
  // The control API's address for session.json, known before the proxy starts:
  // "unix:SESSION_DIR/control/control.sock".
  std::string control_address() const;
  // Create and start the proxy, hand it its control credentials and the secrets' values on
  // stdin (the start-up channel), and wait for "ready".
  void start_proxy(const control::PeerCredentials& server,
                   const std::vector<SessionSecret>& secrets = {});
  // Create the sandbox container (not started) and its home volume, with `engine`: a client
  // of its own when this runs beside start_proxy. Returns its id.
  std::string create_sandbox(docker::Client& engine);

  const SessionSpec& spec() const { return spec_; }
  // Before create_sandbox: the project's filtered view (SessionSpec::project_view).
  void set_project_view(std::filesystem::path view) { spec_.project_view = std::move(view); }
  const std::string& proxy_ip() const { return proxy_ip_; }
  const std::string& sandbox_id() const { return sandbox_id_; }
  const std::string& proxy_id() const { return proxy_id_; }
  docker::Labels labels(const std::string& role) const;

 private:
  std::string proxy_config() const;
  // The host's addresses for the proxy's block-cidr: this namespace's interfaces, and the
  // gateways of the engine's networks (create_networks() reads them).
  std::vector<std::string> block_ranges() const;
  std::vector<std::string> sandbox_env() const;
  // NAME=vibepit-secret-NAME for each of the session's credentials.
  std::vector<std::string> placeholder_env() const;
  // The inspection CA's certificate (the proxy wrote it) added to the host's CAs, in the
  // sandbox's bundle.
  void complete_sandbox_bundle();
  // Whether the proxy is given a bundle for upstreams (the host has CAs, or --upstream-ca).
  bool upstream_cas() const { return !system_cas_.empty() || !spec_.upstream_ca.empty(); }
  // The volume for the sandbox's home (found or made).
  std::string home_volume(docker::Client& engine);

  docker::Client& docker_;
  SessionSpec spec_;
  Report report_;
  std::string session_net_, egress_net_;
  std::string proxy_ip_, proxy_egress_ip_, sandbox_ip_;
  std::vector<std::string> engine_host_ranges_;
  std::string system_cas_;  // the host's CA bundle (PEM), or empty when it has none
  std::string proxy_id_, sandbox_id_;
};

// Where the session's proxy writes its decision records, on the host.
std::filesystem::path decision_log_path(const std::filesystem::path& session_dir);

// Remove the session's containers (forced) and networks, found by label. Returns the
// failures as messages; an empty result means nothing of the session is left.
std::vector<std::string> remove_session(docker::Client& docker, const std::string& session_id);

}  // namespace vibepit::launcher
