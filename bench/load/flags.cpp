#include "modes.hpp"

namespace vibepit::bench {

void add_client_flags(CLI::App& cmd, ClientFlags& f) {
  cmd.add_option("--proxy", f.proxy,
                 "Proxy HOST:PORT, or 'none' to connect directly (the no-proxy ceiling)")
      ->required();
  cmd.add_option("--threads", f.threads,
                 "Client I/O threads, one io_context each. Default 1 so that the load "
                 "generator leaves the other cores to the proxy under test")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd.add_option("--timeout", f.timeout_s,
                 "Seconds any single connect, handshake, read or write may take before it "
                 "counts as a timeout error")
      ->check(CLI::Range(0.001, 600.0))
      ->capture_default_str();
}

}  // namespace vibepit::bench
