// vibepit-proxy: the egress appliance. Parses flags, loads the config, wires objects.
#include <sys/resource.h>

#include <csignal>
#include <iostream>
#include <optional>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "vibepit/dns/server.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/proxy/config.hpp"
#include "vibepit/proxy/decision_log.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/proxy/server.hpp"

namespace {

// Tunnels hold two sockets (and two pipes while data moves): use the fds we are allowed.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::string endpoint_text(const asio::ip::address& addr, std::uint16_t port) {
  return (addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string()) + ":" +
         std::to_string(port);
}

int wait_for_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vibepit-proxy: filtering DNS and HTTP/CONNECT egress proxy"};
  std::string config_path;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "JSON configuration file (docs/config.md)")
      ->required();
  app.add_flag("--check", check_only, "validate the configuration and exit");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_default_logger(spdlog::stderr_color_mt("vibepit-proxy"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  vibepit::proxy::Config cfg;
  try {
    cfg = vibepit::proxy::load_config(config_path);
  } catch (const vibepit::proxy::ConfigError& e) {
    std::cerr << "vibepit-proxy: invalid configuration " << config_path << ": " << e.what() << "\n";
    return 2;
  }
  if (check_only) {
    std::cout << "configuration OK\n";
    return 0;
  }

  // Block the stop signals in every thread; the main thread takes them with sigwait().
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  try {
    vibepit::proxy::resolver_library_init();
    auto compiled = vibepit::policy::compile(cfg.rules, 1);
    vibepit::policy::SnapshotStore store(
        std::get<std::shared_ptr<const vibepit::policy::Snapshot>>(compiled));
    vibepit::proxy::DecisionLog log(cfg.decision_log, cfg.decision_ring);
    vibepit::proxy::ProxyServer server(cfg, store, log);
    for (const auto& ep : server.listen()) {
      // Scripts parse this line: "listening proxy ADDR:PORT".
      spdlog::info("listening proxy {}", endpoint_text(ep.address(), ep.port()));
    }
    // The DNS server runs on the proxy's threads; declared after it, so it goes first.
    std::optional<vibepit::dns::DnsServer> dns;
    if (!cfg.dns.listen.empty()) {
      dns.emplace(cfg, store, server);
      for (const auto& ep : dns->listen()) {
        // "listening dns ADDR:PORT": UDP and TCP share the port.
        spdlog::info("listening dns {}", endpoint_text(ep.address(), ep.port()));
      }
    }
    log.start();
    server.start();
    if (dns) dns->start();
    spdlog::info("ready: {} allow-http, {} allow-dns rules, generation {}",
                 cfg.rules.allow_http.size(), cfg.rules.allow_dns.size(), store.generation());
    int sig = wait_for_signal();
    spdlog::info("signal {}: draining (up to {} ms)", sig, cfg.drain_timeout.count());
    if (dns) dns->stop();
    server.shutdown();
    log.stop();
    spdlog::info("stopped");
  } catch (const std::exception& e) {
    spdlog::error("fatal: {}", e.what());
    return 1;
  }
  return 0;
}
