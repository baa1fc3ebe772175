// vibepit-proxy: the egress appliance. Parses flags, loads the config, wires objects.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "logging.hpp"
#include "rules_watch.hpp"
#include "secrets.hpp"
#include "vibepit/config/config.hpp"
#include "vibepit/config/system_resolvers.hpp"
#include "vibepit/control/plane.hpp"
#include "vibepit/control/startup_channel.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/dns/server.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/proxy/inspection.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/proxy/server.hpp"
#include "vibepit/runtime/health.hpp"
#include "vibepit/runtime/pending.hpp"
#include "vibepit/secret/source.hpp"
#include "vibepit/tls/inspection_ca.hpp"

namespace {

// Tunnels hold two sockets (and two pipes while data moves): use the descriptors we are
// allowed, and say so when even the hard limit is short of what the configuration can need.
void raise_fd_limit(const vibepit::config::Config& cfg) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
  }
  const unsigned threads =
      cfg.proxy.threads ? cfg.proxy.threads : std::max(1u, std::thread::hardware_concurrency());
  const auto need = vibepit::config::descriptor_budget(cfg, threads);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need.total()) {
    spdlog::warn(
        "the open-file limit is {}, but this configuration can need {} descriptors: "
        "max-connections {} x {} = {}, dns-max-tcp {} x {} threads = {}, and {} for the rest. "
        "Raise the limit (ulimit -n, docker run --ulimit nofile=N) or lower max-connections, "
        "dns-max-tcp or threads; past the limit, new clients are refused with 503",
        static_cast<unsigned long long>(rl.rlim_cur), need.total(), cfg.proxy.max_connections,
        vibepit::config::kDescriptorsPerConnection, need.connections, cfg.dns.max_tcp, threads,
        need.dns_tcp, need.fixed);
  }
}

std::string endpoint_text(const asio::ip::address& addr, std::uint16_t port) {
  return vibepit::policy::join_host_port(addr.to_string(), port);
}

// The inspection CA's certificate (never its key), whole or not at all: written beside
// `path` and renamed over it, readable by all (it is public).
void write_ca_cert(const std::string& path, const std::string& pem) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw std::runtime_error("inspect-ca-cert-out: cannot create " + tmp);
  const bool written = ::write(fd, pem.data(), pem.size()) == static_cast<ssize_t>(pem.size()) &&
                       ::fchmod(fd, 0644) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("inspect-ca-cert-out: cannot write " + path);
  }
}

int wait_for_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

int run(int argc, char** argv) {
  CLI::App app{"vibepit-proxy: filtering DNS and HTTP/CONNECT egress proxy"};
  std::string config_path;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "JSON configuration file (docs/config.md)")
      ->required();
  app.add_flag("--check", check_only, "validate the configuration and exit");
  vibepit::control::PlaneOptions control_opts;
  std::string session_dir;
  app.add_option("--session-dir", session_dir,
                 "standalone control API: make this session's mTLS credentials and write the "
                 "client's set (and session.json) into DIR");
  int credentials_fd = -1;
  app.add_option("--credentials-fd", credentials_fd,
                 "read the start-up channel from this inherited descriptor: the control "
                 "server's credentials, then any credentials' values (the launcher's way)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--session-id", control_opts.session_id,
                 "session id for certificate names (default: the session directory's name)");
  CLI11_PARSE(app, argc, argv);
  control_opts.session_dir = session_dir;

  vibepit::appliance::set_up_logging();

  vibepit::config::Config cfg;
  std::string upstream_source = "the config";
  std::shared_ptr<const vibepit::policy::Credentials> credentials;
  std::vector<vibepit::policy::TenantTokens> tenant_tokens;
  vibepit::appliance::StartRules start_rules;
  try {
    cfg = vibepit::config::load_config(config_path);
    if (cfg.upstream_dns().empty()) {
      auto found = vibepit::config::system_resolvers();
      cfg.set_upstream_dns(std::move(found.servers));
      upstream_source = std::move(found.source) + ", as upstream-dns is not set";
    }
  } catch (const vibepit::config::ConfigError& e) {
    std::cerr << "vibepit-proxy: invalid configuration " << config_path << ": " << e.what() << "\n";
    return 2;
  }
  vibepit::appliance::use_log_format(cfg.log_format);
  try {
    credentials = vibepit::appliance::read_credentials(cfg);
    tenant_tokens = vibepit::appliance::read_tenant_tokens(cfg);
    start_rules.rules = cfg.rules;
    if (!cfg.rules_file.empty())
      start_rules = vibepit::appliance::load_start_rules(cfg.rules_file, cfg.rules);
    if (credentials_fd >= 0 && !check_only) {
      auto channel = vibepit::control::read_startup_channel(credentials_fd);
      control_opts.server_credentials = std::move(channel.server);
      credentials =
          vibepit::appliance::with_channel(std::move(credentials), std::move(channel.credentials));
    }
  } catch (const std::exception& e) {
    std::cerr << "vibepit-proxy: " << e.what() << "\n";
    return 2;
  }
  const bool have_credentials = !session_dir.empty() || credentials_fd >= 0;
  if ((!cfg.control.listen.empty() || !cfg.control.socket.empty()) && !have_credentials) {
    std::cerr << "vibepit-proxy: control-listen or control-socket is set, but the control API "
                 "needs credentials: "
                 "pass --session-dir DIR or --credentials-fd N\n";
    return 2;
  }
  if (!session_dir.empty() && credentials_fd >= 0) {
    std::cerr << "vibepit-proxy: --session-dir and --credentials-fd exclude each other\n";
    return 2;
  }
  const auto upstreams = vibepit::config::to_string(cfg.upstream_dns());
  if (check_only) {
    std::cout << "configuration OK; upstream DNS " << upstreams << " (from " << upstream_source
              << ")\n";
    return 0;
  }

  // Block the stop signals in every thread; the main thread takes them with sigwait().
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);  // reopens the decision log
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit(cfg);

  try {
    // Scripts parse this line too: "upstream dns ADDR:PORT... (from SOURCE)".
    spdlog::info("upstream dns {} (from {})", upstreams, upstream_source);
    vibepit::runtime::resolver_library_init();
    auto compiled = std::get<std::shared_ptr<vibepit::policy::Snapshot>>(
        vibepit::policy::compile_mutable(start_rules.rules, 1));
    compiled->credentials = std::move(credentials);
    vibepit::policy::SnapshotStore store(
        vibepit::policy::with_tenant_tokens(*compiled, tenant_tokens));
    // Rule writers are serialised by one updater: the control plane's, or this one.
    std::optional<vibepit::control::RuleUpdater> local_rules;
    // The control thread reads the log's ring, and the log's writer thread feeds the control
    // plane's counters. So, on every way out of this scope: the control thread stops first
    // (stop_control), then the log's writer (~DecisionLog), and only then is the control
    // plane destroyed.
    // Ask mode's held requests: the proxy's threads hold them, the control API lists and
    // answers them. Declared first, so it outlives both.
    vibepit::runtime::PendingTable pending(cfg.ask);
    std::optional<vibepit::control::ControlPlane> control;
    vibepit::decision_log::DecisionLog log(cfg.log.path, cfg.log.ring,
                                           {cfg.log.max_bytes, cfg.log.keep});
    struct StopControl {
      std::optional<vibepit::control::ControlPlane>& plane;
      ~StopControl() {
        if (plane) plane->stop();
      }
    } stop_control{control};
    // The inspection CA: made now, so that the sandbox can trust it from the start and a
    // rule added later inspects at once. It ends with the session's certificates.
    vibepit::tls::InspectionCa inspection_ca(
        {.session_id = control_opts.session_id,
         .lifetime = std::chrono::hours(cfg.control.cert_lifetime_hours)});
    vibepit::proxy::Inspection inspection(inspection_ca, cfg.proxy.upstream_ca_file);
    control_opts.inspect_ca_pem = inspection_ca.cert_pem();
    if (!cfg.proxy.inspect_ca_cert_out.empty()) {
      write_ca_cert(cfg.proxy.inspect_ca_cert_out, inspection_ca.cert_pem());
      spdlog::info("inspection CA certificate in {}", cfg.proxy.inspect_ca_cert_out);
    }
    vibepit::proxy::ProxyServer server(cfg.proxy, store, log, &pending);
    server.set_inspection(&inspection);
    for (const auto& ep : server.listen()) {
      // Scripts parse this line: "listening proxy ADDR:PORT".
      spdlog::info("listening proxy {}", endpoint_text(ep.address(), ep.port()));
    }
    // The DNS server runs on the proxy's threads; declared after it, so it goes first.
    std::optional<vibepit::dns::DnsServer> dns;
    // Liveness and readiness for an orchestrator; declared after the servers it asks about.
    std::atomic<bool> serving{false}, draining{false};
    std::optional<vibepit::runtime::UpstreamProbe> probe;
    std::optional<vibepit::runtime::HealthServer> health;
    if (!cfg.health_listen.empty()) {
      probe.emplace(cfg.upstream_dns(), std::chrono::seconds(2), std::chrono::seconds(1));
      const auto loops = server.loops();
      health.emplace(
          cfg.health_listen,
          vibepit::runtime::HealthChecks{
              [loops] { return vibepit::runtime::loops_turning(loops, std::chrono::seconds(1)); },
              [&] {
                std::string why;
                if (!serving) why += "starting\n";
                if (draining) why += "draining\n";
                return why + probe->answering();
              }});
      for (const auto& ep : health->listening()) {
        // "listening health ADDR:PORT": plain HTTP, /livez and /readyz.
        spdlog::info("listening health {}", ep.to_string());
      }
      health->start();
    }
    if (!cfg.dns.listen.empty()) {
      dns.emplace(cfg.dns, store, server.loops());
      for (const auto& ep : dns->listen()) {
        // "listening dns ADDR:PORT": UDP and TCP share the port.
        spdlog::info("listening dns {}", endpoint_text(ep.address(), ep.port()));
      }
    }
    // The control plane registers its counters with the log, so it comes before log.start().
    if (have_credentials) {
      auto control_cfg = cfg.control;
      // A control socket alone: no TCP listener by default.
      if (cfg.control.socket.empty())
        control_cfg.listen = vibepit::config::control_listen_or_default(cfg);
      control.emplace(std::move(control_cfg), store, log, control_opts, &pending);
      for (const auto& ep : control->listen()) {
        // "listening control ADDR:PORT" (mutual TLS).
        spdlog::info("listening control {}", endpoint_text(ep.address(), ep.port()));
      }
      if (!cfg.control.socket.empty())
        spdlog::info("listening control unix:{}", cfg.control.socket);
      if (!session_dir.empty())
        spdlog::info("session {} credentials in {}", control->session_id(), session_dir);
    }
    if (!control) local_rules.emplace(store);
    auto& rules = control ? control->rules() : *local_rules;
    rules.set_base(cfg.rules);  // what a rules file's every version adds to
    std::optional<vibepit::appliance::TenantTokenFiles> token_files;
    if (!cfg.tenants.empty()) token_files.emplace(cfg, std::move(tenant_tokens), rules);
    std::optional<vibepit::appliance::RulesFileWatch> rules_watch;
    if (!cfg.rules_file.empty()) {
      rules_watch.emplace(cfg.rules_file, std::move(start_rules.text), rules);
      spdlog::info("rules file {}: watched", cfg.rules_file);
    }
    log.start();
    server.start();
    if (dns) dns->start();
    if (control) control->start();
    serving = true;
    spdlog::info("ready: {} allow-http, {} allow-dns rules, {} credentials, generation {}",
                 cfg.rules.allow_http.size(), cfg.rules.allow_dns.size(),
                 store.current()->credentials ? store.current()->credentials->size() : 0,
                 store.generation());
    if (cfg.ask.enabled) {
      spdlog::info("ask mode: a request no rule allows is held up to {} ms for a decision",
                   cfg.ask.timeout.count());
    }
    int sig = wait_for_signal();
    for (; sig == SIGHUP; sig = wait_for_signal()) {
      spdlog::info("signal {}: reopening the decision log, re-reading credential and token files",
                   sig);
      log.reopen();
      vibepit::appliance::reread_credentials(cfg, rules);
      if (token_files) token_files->reload();
      if (rules_watch) rules_watch->reload();
    }
    spdlog::info("signal {}: draining (up to {} ms)", sig, cfg.proxy.drain_timeout.count());
    draining = true;  // readiness fails from now on: an orchestrator sends nothing new
    if (dns) dns->stop();
    // Held requests are answered now (503), and nothing more is held.
    if (const auto n = pending.end_all(vibepit::runtime::HoldEnd::shutdown))
      spdlog::info("answered {} held requests", n);
    server.shutdown();
    log.stop();
    // The control API outlives the data path by this much: a decision follower (vibepit ci)
    // gets the last records and the log's final counters, and so knows it has them all.
    if (control) {
      control->finish_followers(std::chrono::seconds(2));
      control->stop();
    }
    spdlog::info("stopped");
  } catch (const std::exception& e) {
    spdlog::error("fatal: {}", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

// What run() did not expect (a logger that cannot be made, memory): said, never an abort.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vibepit-proxy: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "vibepit-proxy: an unknown error\n";
  }
  return 1;
}
