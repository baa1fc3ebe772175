#include "vibepit/control/plane.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <stdexcept>

#include <openssl/crypto.h>
#include <nlohmann/json.hpp>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/control/tls.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/runtime/heap.hpp"
#include "vibepit/runtime/pending.hpp"

namespace vibepit::control {
namespace {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void wipe(std::string& secret) {
  if (!secret.empty()) OPENSSL_cleanse(secret.data(), secret.size());
  secret.clear();
}

asio::ip::tcp::endpoint to_endpoint(const config::Endpoint& e) {
  auto text = e.addr.to_string();
  return {asio::ip::make_address(text), e.port};
}

}  // namespace

class ControlPlane::Feed : public DecisionFeed {
 public:
  explicit Feed(const decision_log::DecisionLog& log) : log_(log) {}
  std::vector<Entry> since(std::uint64_t after, std::size_t limit,
                           std::uint64_t& lost) const override {
    std::vector<Entry> out;
    for (auto& e : log_.since(after, limit, lost)) out.push_back({e.seq, std::move(e.line)});
    return out;
  }
  std::uint64_t last_seq() const override { return log_.last_seq(); }
  std::string end_line() const override {
    if (!log_.stopped()) return {};
    return "{\"end\":true,\"last\":" + std::to_string(log_.last_seq()) +
           ",\"dropped\":" + std::to_string(log_.dropped()) +
           ",\"unwritten\":" + std::to_string(log_.unwritten()) + "}\n";
  }

 private:
  const decision_log::DecisionLog& log_;
};

// The decision counters, plus what only the control server and the log know: refused
// handshakes and requests, and records dropped because the log's queues were full.
class ControlPlane::Metrics : public StatsSource {
 public:
  Metrics(const DecisionStats& stats, const decision_log::DecisionLog& log,
          const RuleUpdater& rules)
      : stats_(stats), log_(log), rules_(rules) {}
  void attach(const ServerCounters* c) { server_ = c; }  // before the control thread starts

  std::string stats_json() const override {
    auto j = stats_.to_json();
    j["decision_log_dropped"] = log_.dropped();
    j["decision_log_unwritten"] = log_.unwritten();
    if (const auto heap = runtime::heap_figures(); heap.known) {
      j["heap"] = {{"in_use", heap.in_use}, {"free", heap.free}, {"mapped", heap.mapped}};
    }
    if (server_) {
      j["control"] = {{"accepted", server_->accepted.load()},
                      {"refused_busy", server_->refused_busy.load()},
                      {"handshake_failed", server_->handshake_failed.load()},
                      {"plain_http", server_->plain_http.load()},
                      {"requests", server_->requests.load()},
                      {"rate_limited", server_->rate_limited.load()}};
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }

  std::string prometheus() const override {
    std::string out = stats_.prometheus();
    prometheus_header(out, "vibepit_decision_log_dropped_total", "counter",
                      "Decision records dropped because a queue was full.");
    prometheus_sample(out, "vibepit_decision_log_dropped_total", log_.dropped());
    prometheus_header(out, "vibepit_decision_log_unwritten_total", "counter",
                      "Decision records the log file could not take (disk full, the file gone); "
                      "they stayed in the ring.");
    prometheus_sample(out, "vibepit_decision_log_unwritten_total", log_.unwritten());
    if (const auto heap = runtime::heap_figures(); heap.known) {
      const char* name = "vibepit_heap_bytes";
      prometheus_header(out, name, "gauge",
                        "The C library's heap: bytes in use, and bytes free inside its arenas.");
      prometheus_sample(out, name, "state", "in_use", heap.in_use);
      prometheus_sample(out, name, "state", "free", heap.free);
    }
    const auto files = rules_.file_counts();
    const char* reloads = "vibepit_rules_file_reloads_total";
    prometheus_header(out, reloads, "counter",
                      "Versions of the watched rules file: applied, or invalid (the rules in "
                      "force stayed).");
    prometheus_sample(out, reloads, "result", "applied", files.applied);
    prometheus_sample(out, reloads, "result", "invalid", files.invalid);
    if (server_) {
      const char* errors = "vibepit_control_errors_total";
      prometheus_header(out, errors, "counter",
                        "Control connections and requests refused, by kind.");
      prometheus_sample(out, errors, "kind", "handshake", server_->handshake_failed.load());
      prometheus_sample(out, errors, "kind", "plain_http", server_->plain_http.load());
      prometheus_sample(out, errors, "kind", "busy", server_->refused_busy.load());
      prometheus_sample(out, errors, "kind", "rate_limited", server_->rate_limited.load());
      prometheus_header(out, "vibepit_control_requests_total", "counter",
                        "Control API requests answered.");
      prometheus_sample(out, "vibepit_control_requests_total", server_->requests.load());
    }
    return out;
  }

 private:
  const DecisionStats& stats_;
  const decision_log::DecisionLog& log_;
  const RuleUpdater& rules_;
  const ServerCounters* server_ = nullptr;
};

// Ask mode's table as the API sees it. The API runs on one thread: a change of settings is
// read, changed and written with no other change in between.
class ControlPlane::Pending final : public PendingSource {
 public:
  explicit Pending(runtime::PendingTable& table) : table_(table) {}

  AskSettings ask() const override { return view(table_.settings()); }

  AskSettings set_ask(std::optional<bool> enabled,
                      std::optional<std::uint64_t> timeout_ms) override {
    auto s = table_.settings();
    if (enabled) s.enabled = *enabled;
    if (timeout_ms) s.timeout = std::chrono::milliseconds(*timeout_ms);
    table_.set_settings(s);
    return view(table_.settings());
  }

  std::vector<PendingView> pending() const override {
    const auto now = std::chrono::steady_clock::now();
    const auto wall = decision_log::now_us();
    std::vector<PendingView> out;
    for (const auto& r : table_.list()) {
      PendingView v;
      v.id = r.id;
      v.method = r.method;
      v.host = r.host;
      v.port = r.port;
      v.client = policy::join_host_port(r.client_ip.to_string(), r.client_port);
      v.since_us = r.since_us;
      v.waited_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(wall - r.since_us, 0) / 1000);
      v.expires_in_ms =
          r.deadline > now
              ? static_cast<std::uint64_t>(
                    std::chrono::duration_cast<std::chrono::milliseconds>(r.deadline - now).count())
              : 0;
      out.push_back(std::move(v));
    }
    return out;
  }

  bool refuse(std::uint64_t id) override { return table_.refuse(id); }

 private:
  static AskSettings view(const config::AskConfig& c) {
    return {c.enabled, static_cast<std::uint64_t>(c.timeout.count()), c.max_per_client,
            c.max_total};
  }
  runtime::PendingTable& table_;
};

ControlPlane::ControlPlane(config::ControlConfig cfg, policy::SnapshotStore& store,
                           decision_log::DecisionLog& log, PlaneOptions opts,
                           runtime::PendingTable* pending)
    : cfg_(std::move(cfg)),
      opts_(std::move(opts)),
      feed_(std::make_unique<Feed>(log)),
      stats_(cfg_.stats_hosts),
      metrics_(std::make_unique<Metrics>(stats_, log, rules_)),
      rules_(store) {
  log.set_observer([this](const decision_log::DecisionRecord& r) { stats_.observe(r); });
  session_id_ = opts_.session_id;
  if (session_id_.empty()) {
    session_id_ =
        opts_.session_dir.empty() ? new_session_id() : opts_.session_dir.filename().string();
  }
  ApiLimits limits;
  limits.max_body = cfg_.max_body;
  limits.max_entries = cfg_.max_entries;
  if (pending) {
    pending_ = std::make_unique<Pending>(*pending);
    rules_.on_publish([pending] { pending->rules_changed(); });
  }
  api_ = std::make_unique<ControlApi>(rules_, store, *feed_, *metrics_, limits, pending_.get());
  api_->set_inspect_ca(opts_.inspect_ca_pem);
}

ControlPlane::~ControlPlane() {
  stop();
}

std::vector<asio::ip::tcp::endpoint> ControlPlane::listen() {
  ServerOptions so;
  for (const auto& e : cfg_.listen) {
    so.listen.push_back(to_endpoint(e));
  }
  so.socket_path = cfg_.socket;
  so.max_clients = cfg_.max_clients;
  so.rate = cfg_.rate;
  so.burst = cfg_.burst;
  so.timeout = cfg_.timeout;
  so.idle = cfg_.idle;

  PeerCredentials server;
  if (opts_.server_credentials) {
    server = std::move(*opts_.server_credentials);
    opts_.server_credentials.reset();
  } else if (!opts_.session_dir.empty()) {
    CredentialOptions co;
    co.session_id = session_id_;
    co.lifetime = std::chrono::hours(cfg_.cert_lifetime_hours);
    for (const auto& ep : so.listen) {
      if (!ep.address().is_unspecified()) co.server_ips.push_back(ep.address().to_string());
    }
    generated_ = issue_session_credentials(co);
    server = generated_->server_side();
    wipe(generated_->server.key_pem);  // the only copy left is `server`, wiped below
  } else {
    throw std::runtime_error(
        "the control API needs credentials: pass --session-dir DIR (standalone) or "
        "--credentials-fd N (from the launcher)");
  }
  auto tls = make_server_tls(server);
  wipe(server.own.key_pem);  // OpenSSL holds the key now; no PEM copy stays in memory
  server_ = std::make_unique<ControlServer>(*api_, *feed_, std::move(tls), so);
  metrics_->attach(&server_->counters());
  auto bound = server_->listen();

  if (generated_) {
    std::string where = "unix:" + cfg_.socket;
    if (!bound.empty()) {
      const auto& ep = bound.front();
      where = policy::join_host_port(
          ep.address().is_unspecified() ? std::string("127.0.0.1") : ep.address().to_string(),
          ep.port());
    }
    SessionInfo info{session_id_, where, static_cast<std::int64_t>(::getpid()), utc_now(), ""};
    write_client_set(opts_.session_dir, generated_->client_side(), info);
    wipe(generated_->client.key_pem);
  }
  return bound;
}

void ControlPlane::start() {
  if (server_) server_->start();
}

void ControlPlane::finish_followers(std::chrono::milliseconds within) {
  if (server_) server_->finish_followers(within);
}

void ControlPlane::stop() {
  if (server_) server_->stop();
}

}  // namespace vibepit::control
