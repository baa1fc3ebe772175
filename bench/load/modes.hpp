// The subcommands of vibepit-bench. Each registers its flags and a runner that returns the
// JSON result; main writes it out and turns `ok` into the exit status.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>

namespace vibepit::bench {

struct ModeResult {
  nlohmann::ordered_json json;
  bool ok = true;  // false when the run achieved nothing at all (exit status 1)
};

using Runner = std::function<ModeResult()>;

// Each adds its subcommand to `app`; when that subcommand is chosen, `runner` is set.
void add_serve(CLI::App& app, Runner& runner);
void add_connect_throughput(CLI::App& app, Runner& runner);
void add_connect_rate(CLI::App& app, Runner& runner);
void add_http_rps(CLI::App& app, Runner& runner);
void add_idle_tunnels(CLI::App& app, Runner& runner);
void add_dns_auth(CLI::App& app, Runner& runner);
void add_dns_relay(CLI::App& app, Runner& runner);
void add_file_append(CLI::App& app, Runner& runner);

// Flags shared by the client modes.
struct ClientFlags {
  std::string proxy;
  std::string proxy_user;  // NAME:TOKEN, sent as Proxy-Authorization: Basic (a tenant)
  unsigned threads = 1;
  double timeout_s = 5.0;
};

// --proxy, --proxy-user, --threads, --timeout.
void add_client_flags(CLI::App& cmd, ClientFlags& f);

// "Proxy-Authorization: Basic ...\r\n" for --proxy-user, or "" without it.
std::string proxy_auth_field(const ClientFlags& f);

}  // namespace vibepit::bench
