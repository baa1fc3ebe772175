// `idle-tunnels`: open N CONNECT tunnels with bounded concurrency, report how many stand,
// hold them idle for S seconds (so a script can read the proxy's RSS), then close them.
#include "modes.hpp"
#include "tunnel.hpp"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>

namespace vibepit::bench {

namespace {

struct IdleOptions {
  ClientFlags client;
  std::string target;
  std::uint64_t count = 1000;
  double hold_s = 30;
  std::string ready_file;
  unsigned open_concurrency = 256;
  double open_duration_s = 300;
};

struct Lane {
  std::vector<std::unique_ptr<Conn>> conns;
  Samples open_latency;
  Errors errors;
  std::uint64_t dropped = 0;           // closed by the peer during the hold
  std::uint64_t unexpected_bytes = 0;  // the target or proxy spoke during the hold
};

struct Shared {
  Route route;
  Clock::time_point open_end;
  Clock::duration timeout;
  std::uint64_t count = 0;
  std::atomic<std::uint64_t> next{0};
};

asio::awaitable<void> opener(Worker& w, Lane& lane, Shared& sh) {
  // On the heap: a coroutine frame this large would skip Asio's frame recycling.
  auto buf = std::make_unique<char[]>(kMaxConnectAnswer);
  while (!w.stopping()) {
    auto t0 = Clock::now();
    if (t0 >= sh.open_end || sh.next.fetch_add(1, std::memory_order_relaxed) >= sh.count) break;
    auto c = std::make_unique<Conn>(w);
    std::size_t extra = 0;
    auto st = co_await open_tunnel(*c, sh.route, sh.timeout,
                                   std::span<char>(buf.get(), kMaxConnectAnswer), extra);
    if (st != OpenStatus::ok) {
      if (!w.stopping()) count_open_error(lane.errors, st);
      continue;
    }
    lane.open_latency.add(Clock::now() - t0);
    lane.unexpected_bytes += extra;
    lane.conns.push_back(std::move(c));
  }
}

// Waits on one held tunnel so that a close by the proxy during the hold is seen.
asio::awaitable<void> watch(Conn& c, Lane& lane) {
  char buf[64];
  asio::error_code ec;
  for (;;) {
    std::size_t n = co_await c.socket().async_read_some(asio::buffer(buf), with_ec(ec));
    lane.unexpected_bytes += n;
    if (ec) break;
  }
  if (!c.worker().stopping()) ++lane.dropped;
  c.close();
}

void write_ready_file(const std::string& path, std::uint64_t established) {
  if (path.empty()) return;
  // Write then rename, so that a script polling for the file never reads half of it.
  auto tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << established << "\n";
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

ModeResult run_idle(const IdleOptions& o) {
  auto hold = seconds_flag(o.hold_s, "--hold");
  auto open_duration = seconds_flag(o.open_duration_s, "--open-duration");
  Shared sh;
  sh.timeout = seconds_flag(o.client.timeout_s, "--timeout");
  sh.route = make_route(parse_proxy(o.client.proxy), parse_host_port(o.target),
                        proxy_auth_field(o.client));
  sh.count = o.count;
  auto nofile = raise_nofile_limit();
  if (o.count + 64 > nofile)
    throw ConfigError("--count " + std::to_string(o.count) + " exceeds the fd limit " +
                      std::to_string(nofile) + " (raise the hard limit: ulimit -Hn)");

  Workers ws = make_workers(o.client.threads);
  std::vector<Lane> lanes(ws.size());
  for (auto& lane : lanes) {
    lane.conns.reserve(o.count / ws.size() + 1);
    lane.open_latency.reserve(reserve_hint(o.count, ws.size()));
  }

  // Phase 1: open.
  auto open_start = Clock::now();
  sh.open_end = open_start + open_duration;
  auto in_flight = static_cast<unsigned>(std::min<std::uint64_t>(o.open_concurrency, o.count));
  for (unsigned i = 0; i < in_flight; ++i) {
    auto& w = *ws[i % ws.size()];
    w.spawn(opener(w, lanes[w.index()], sh));
  }
  for (auto& w : ws) w->set_hard_stop(sh.open_end + sh.timeout + std::chrono::seconds(1));
  run_workers(ws, sh.open_end + sh.timeout + std::chrono::seconds(2));
  double open_s = seconds_between(open_start, Clock::now());

  std::uint64_t established = 0;
  for (auto& lane : lanes) established += lane.conns.size();
  std::cerr << "established " << established << " of " << o.count << " tunnels in " << open_s
            << " s; holding for " << o.hold_s << " s" << std::endl;
  write_ready_file(o.ready_file, established);

  // Phase 2: hold them idle. Runs the full hold even if every tunnel drops.
  auto hold_start = Clock::now();
  for (auto& w : ws) {
    auto& lane = lanes[w->index()];
    for (auto& c : lane.conns) w->spawn(watch(*c, lane));
    w->set_keep_alive(true);
    w->set_hard_stop(hold_start + hold);
  }
  run_workers(ws, hold_start + hold + std::chrono::seconds(2));
  double hold_elapsed = seconds_between(hold_start, Clock::now());

  Lane all;
  for (auto& lane : lanes) {
    all.open_latency.merge(lane.open_latency);
    all.errors.merge(lane.errors);
    all.dropped += lane.dropped;
    all.unexpected_bytes += lane.unexpected_bytes;
    lane.conns.clear();
  }
  nlohmann::ordered_json j;
  j["mode"] = "idle-tunnels";
  j["parameters"] = {{"proxy", o.client.proxy},
                     {"target", o.target},
                     {"count", o.count},
                     {"hold_s", o.hold_s},
                     {"ready_file", o.ready_file},
                     {"open_concurrency", o.open_concurrency},
                     {"open_duration_s", o.open_duration_s},
                     {"threads", o.client.threads},
                     {"timeout_s", o.client.timeout_s},
                     {"nofile_limit", nofile}};
  j["results"] = {{"established", established},
                  {"open_s", open_s},
                  {"tunnels_per_s_opening", static_cast<double>(established) / open_s},
                  {"open_latency_us", all.open_latency.summary()},
                  {"held_s", hold_elapsed},
                  {"dropped_during_hold", all.dropped},
                  {"unexpected_bytes", all.unexpected_bytes},
                  {"stopped_by_signal", stop_requested()}};
  j["errors"] = all.errors.to_json();
  j["cpu"] = cpu_usage();
  return {j, established > 0};
}

}  // namespace

void add_idle_tunnels(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<IdleOptions>();
  auto* cmd = app.add_subcommand(
      "idle-tunnels",
      "Open N CONNECT tunnels (at most --open-concurrency in flight), write the number "
      "established to --ready-file and stderr, hold them idle for --hold seconds, then close. "
      "Raises RLIMIT_NOFILE to the hard limit first.");
  add_client_flags(*cmd, o->client);
  cmd->add_option("--target", o->target, "Target HOST:PORT (a serve --kind discard or echo)")
      ->required();
  cmd->add_option("--count", o->count, "Tunnels to open")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10'000'000}))
      ->capture_default_str();
  cmd->add_option("--hold", o->hold_s, "Seconds to hold the tunnels idle")->capture_default_str();
  cmd->add_option("--ready-file", o->ready_file,
                  "File that receives the number of established tunnels once opening is done");
  cmd->add_option("--open-concurrency", o->open_concurrency, "Handshakes in flight while opening")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--open-duration", o->open_duration_s, "Upper bound in seconds on opening")
      ->capture_default_str();
  cmd->callback([o, &runner] { runner = [o] { return run_idle(*o); }; });
}

}  // namespace vibepit::bench
