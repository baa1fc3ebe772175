// Shared helpers of the vibepit-bench load generator: addresses, limits, signals, statistics.
#pragma once

#include <asio.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::bench {

using Clock = std::chrono::steady_clock;
using tcp = asio::ip::tcp;

// A bad flag or an unusable setting: main prints it and exits with status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "host:port" or "[v6]:port". `text()` gives the form used in CONNECT and Host.
struct HostPort {
  std::string host;
  std::uint16_t port = 0;
  std::string text() const;
};

HostPort parse_host_port(std::string_view s, bool allow_port_zero = false);
// "none" gives nullopt (direct connections, the no-proxy ceiling).
std::optional<HostPort> parse_proxy(std::string_view s);

// http://host[:port][/path]; only plain http.
struct Url {
  HostPort authority;
  std::string path;  // origin-form, starts with '/'
};
Url parse_url(std::string_view s);

// Blocking resolution, only at start-up, never on an I/O thread.
tcp::endpoint resolve_endpoint(const HostPort& hp, bool passive = false);
std::string endpoint_text(const tcp::endpoint& ep);

// Seconds from a flag, checked against (0, max].
Clock::duration seconds_flag(double s, const char* name, double max_s = 86400.0);

// Raises RLIMIT_NOFILE to the hard limit; returns the soft limit now in force.
std::uint64_t raise_nofile_limit();

// SIGINT/SIGTERM set a flag that every worker polls; SIGPIPE is ignored.
void install_signal_handlers();
bool stop_requested();

// User and system CPU seconds of this process so far.
nlohmann::ordered_json cpu_usage();

// Latency samples in microseconds. Bounded by whoever appends (the --max of each mode).
class Samples {
 public:
  void reserve(std::size_t n) { us_.reserve(n); }
  void add(Clock::duration d);
  void merge(Samples& other);
  std::size_t size() const { return us_.size(); }
  // count, mean, p50, p90, p99, p999, max; sorts in place.
  nlohmann::ordered_json summary();

 private:
  std::vector<std::uint32_t> us_;
};

// Error counters by cause; every mode uses the subset that applies.
struct Errors {
  std::uint64_t connect = 0;       // TCP connect to the first hop failed
  std::uint64_t proxy_status = 0;  // CONNECT answered with a status other than 200
  std::uint64_t proxy_header = 0;  // CONNECT answer malformed or too long
  std::uint64_t timeout = 0;       // an operation exceeded --timeout
  std::uint64_t io = 0;            // read/write failed or peer closed early
  std::uint64_t protocol = 0;      // unparsable HTTP response
  void merge(const Errors& o);
  std::uint64_t total() const;
  nlohmann::ordered_json to_json() const;
};

// Reserve size for sample vectors: never more than the bound, never huge up front.
inline std::size_t reserve_hint(std::uint64_t max_ops, std::size_t workers) {
  std::uint64_t per = max_ops / (workers ? workers : 1) + 1;
  return static_cast<std::size_t>(per < (1u << 20) ? per : (1u << 20));
}

double seconds_between(Clock::time_point a, Clock::time_point b);

}  // namespace vibepit::bench
