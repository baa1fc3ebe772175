// vibepit-bench: load generator and fast upstream servers for proxy benchmarks.
// Parses flags, runs one mode, writes its JSON result. Exit status: 0 done, 1 the run
// achieved nothing (no tunnel, no request), 2 bad configuration.
#include "common.hpp"
#include "modes.hpp"

#include <fstream>
#include <iostream>

namespace {

int write_result(const nlohmann::ordered_json& j, const std::string& out) {
  auto text = j.dump(2) + "\n";
  if (out.empty() || out == "-") {
    std::cout << text << std::flush;
    return 0;
  }
  std::ofstream f(out, std::ios::trunc);
  f << text;
  f.close();
  if (!f) {
    std::cerr << "vibepit-bench: cannot write " << out << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace vibepit::bench;
  CLI::App app{
      "vibepit-bench: load generator and fast upstream servers for proxy benchmarks.\n"
      "Every mode prints one JSON result on stdout (or --out FILE). Client modes default to\n"
      "--threads 1 so that the load generator leaves the other cores to the proxy."};
  app.require_subcommand(1);
  Runner runner;
  add_serve(app, runner);
  add_connect_throughput(app, runner);
  add_connect_rate(app, runner);
  add_http_rps(app, runner);
  add_idle_tunnels(app, runner);
  add_dns_auth(app, runner);
  add_dns_relay(app, runner);
  add_file_append(app, runner);
  std::string out;
  for (auto* cmd : app.get_subcommands({}))
    cmd->add_option("--out", out, "Write the JSON result to FILE instead of stdout");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  install_signal_handlers();
  try {
    ModeResult r = runner();
    if (write_result(r.json, out) != 0) return 1;
    return r.ok ? 0 : 1;
  } catch (const ConfigError& e) {
    std::cerr << "vibepit-bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vibepit-bench: error: " << e.what() << "\n";
    return 1;
  }
}
