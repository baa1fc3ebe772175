#include "common.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstring>

namespace vibepit::bench {

std::string HostPort::text() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(std::string_view s, bool allow_port_zero) {
  HostPort hp;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      throw ConfigError("bad address '" + std::string(s) + "': expected [v6]:port");
    hp.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos || s.find(':') != colon)
      throw ConfigError("bad address '" + std::string(s) + "': expected host:port");
    hp.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (hp.host.empty() || port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      value > 65535 || (value == 0 && !allow_port_zero))
    throw ConfigError("bad address '" + std::string(s) + "': bad host or port");
  hp.port = static_cast<std::uint16_t>(value);
  return hp;
}

std::optional<HostPort> parse_proxy(std::string_view s) {
  if (s == "none") return std::nullopt;
  return parse_host_port(s);
}

Url parse_url(std::string_view s) {
  constexpr std::string_view scheme = "http://";
  if (s.substr(0, scheme.size()) != scheme)
    throw ConfigError("bad url '" + std::string(s) + "': only http:// is supported");
  auto rest = s.substr(scheme.size());
  auto slash = rest.find('/');
  auto authority = rest.substr(0, slash);
  Url url;
  url.path = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  auto bracket = authority.find(']');
  bool has_port = authority.find(':', bracket == std::string_view::npos ? 0 : bracket) !=
                  std::string_view::npos;
  url.authority =
      parse_host_port(has_port ? std::string(authority) : std::string(authority) + ":80");
  return url;
}

tcp::endpoint resolve_endpoint(const HostPort& hp, bool passive) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  asio::error_code ec;
  auto flags = passive ? tcp::resolver::passive : tcp::resolver::flags();
  auto results = resolver.resolve(hp.host, std::to_string(hp.port), flags, ec);
  if (ec || results.empty())
    throw ConfigError("cannot resolve '" + hp.text() + "': " + ec.message());
  return results.begin()->endpoint();
}

std::string endpoint_text(const tcp::endpoint& ep) {
  auto addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

Clock::duration seconds_flag(double s, const char* name, double max_s) {
  if (!(s > 0.0) || s > max_s)
    throw ConfigError(std::string(name) + " must be in (0, " + std::to_string(max_s) + "]");
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::uint64_t raise_nofile_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    rlimit want = lim;
    want.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) lim = want;
  }
  return static_cast<std::uint64_t>(lim.rlim_cur);
}

namespace {
std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) {
  g_stop.store(true, std::memory_order_relaxed);
}
}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

bool stop_requested() {
  return g_stop.load(std::memory_order_relaxed);
}

nlohmann::ordered_json cpu_usage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return {
      {"user_s", secs(ru.ru_utime)}, {"sys_s", secs(ru.ru_stime)}, {"max_rss_kib", ru.ru_maxrss}};
}

void Samples::add(Clock::duration d) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  us_.push_back(static_cast<std::uint32_t>(std::clamp<std::int64_t>(us, 0, UINT32_MAX)));
}

void Samples::merge(Samples& other) {
  us_.insert(us_.end(), other.us_.begin(), other.us_.end());
  other.us_.clear();
  other.us_.shrink_to_fit();
}

nlohmann::ordered_json Samples::summary() {
  nlohmann::ordered_json j;
  j["count"] = us_.size();
  if (us_.empty()) return j;
  std::sort(us_.begin(), us_.end());
  auto at = [&](double q) {
    auto idx = static_cast<std::size_t>(q * static_cast<double>(us_.size() - 1) + 0.5);
    return us_[std::min(idx, us_.size() - 1)];
  };
  double sum = 0;
  for (auto v : us_) sum += v;
  j["mean_us"] = sum / static_cast<double>(us_.size());
  j["min_us"] = us_.front();
  j["p50_us"] = at(0.50);
  j["p90_us"] = at(0.90);
  j["p99_us"] = at(0.99);
  j["p999_us"] = at(0.999);
  j["max_us"] = us_.back();
  return j;
}

void Errors::merge(const Errors& o) {
  connect += o.connect;
  proxy_status += o.proxy_status;
  proxy_header += o.proxy_header;
  timeout += o.timeout;
  io += o.io;
  protocol += o.protocol;
}

std::uint64_t Errors::total() const {
  return connect + proxy_status + proxy_header + timeout + io + protocol;
}

nlohmann::ordered_json Errors::to_json() const {
  return {{"total", total()},
          {"connect", connect},
          {"proxy_status", proxy_status},
          {"proxy_header", proxy_header},
          {"timeout", timeout},
          {"io", io},
          {"protocol", protocol}};
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace vibepit::bench
