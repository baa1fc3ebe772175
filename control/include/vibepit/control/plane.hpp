#pragma once
// The control plane of vibepit-proxy, wired together: credentials (made here, or handed
// over on a descriptor), the rule updater, the decision counters, and the mTLS server.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/ip/tcp.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/control/api.hpp"
#include "vibepit/control/credentials.hpp"
#include "vibepit/control/rule_updater.hpp"
#include "vibepit/control/server.hpp"
#include "vibepit/control/stats.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/runtime/pending.hpp"

namespace vibepit::control {

struct PlaneOptions {
  std::filesystem::path session_dir;  // standalone: make credentials, write the client's set here
  // The launcher's way: the server's set, read from the start-up channel
  // (startup_channel.hpp). Taken, and its key wiped, once the TLS context holds it.
  std::optional<PeerCredentials> server_credentials;
  std::string session_id;      // default: the session directory's name, or a new id
  std::string inspect_ca_pem;  // the inspection CA's certificate, for GET /v1/inspect-ca
};

class ControlPlane {
 public:
  // Registers the counters with `log`, so it must come before log.start().
  // cfg.listen: where to listen, resolved (config::control_listen_or_default).
  // `pending`: ask mode's held requests, which the API lists and refuses and which each
  // rule update wakes; none, and the ask endpoints answer 404.
  ControlPlane(config::ControlConfig cfg, policy::SnapshotStore& store,
               decision_log::DecisionLog& log, PlaneOptions opts,
               runtime::PendingTable* pending = nullptr);
  ~ControlPlane();

  // Bind the control listeners and, in standalone mode, write the client's credentials and
  // session.json. Returns the bound endpoints.
  std::vector<asio::ip::tcp::endpoint> listen();
  void start();
  // After the decision log has stopped: wait, up to `within`, until every decision follower
  // has been sent the last records and the feed's end line (DecisionFeed::end_line).
  void finish_followers(std::chrono::milliseconds within);
  void stop();
  const std::string& session_id() const { return session_id_; }
  // The one writer of rules and credentials (SIGHUP re-reads credential files through it).
  RuleUpdater& rules() { return rules_; }

 private:
  class Feed;
  class Metrics;
  class Pending;
  config::ControlConfig cfg_;
  PlaneOptions opts_;
  std::string session_id_;
  std::optional<SessionCredentials> generated_;  // standalone mode: the client's half to write
  std::unique_ptr<Feed> feed_;
  DecisionStats stats_;
  std::unique_ptr<Metrics> metrics_;  // stats_ plus the control server's and the log's counters
  RuleUpdater rules_;
  std::unique_ptr<Pending> pending_;
  std::unique_ptr<ControlApi> api_;
  std::unique_ptr<ControlServer> server_;
};

}  // namespace vibepit::control
