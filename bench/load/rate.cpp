// `connect-rate`: short tunnels. Each of C slots loops: connect, CONNECT, wait for the 200,
// optionally one byte through an echo server and back (--turns times: an interactive
// tunnel, such as a TLS handshake and a request, is a series of short turns), close.
// Latency per tunnel. With
// --pipeline the byte goes with the CONNECT, so that the client waits once, as a relay's
// client does: the latency is then the proxy's work, without the protocol's extra turn.
#include "modes.hpp"
#include "tunnel.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <fstream>

namespace vibepit::bench {

namespace {

struct RateOptions {
  ClientFlags client;
  std::string target;
  unsigned concurrency = 32;
  double duration_s = 10;
  std::uint64_t max = 1'000'000;
  std::string payload = "echo";
  bool linger0 = false;
  bool pipeline = false;
  unsigned turns = 1;
  double rate = 0;
  std::string samples_path;
};

struct Lane {
  Samples total;  // connect to the echoed byte (or to the 200 without payload)
  Samples setup;  // connect to the proxy's 200 (or to the TCP connect when direct)
  Errors errors;
  std::uint64_t completed = 0;
  // With --samples: each tunnel's start (µs after the run's) and its two latencies (µs).
  std::vector<std::array<std::uint32_t, 3>> each;
};

struct Shared {
  Route route;
  Clock::time_point end;
  Clock::duration timeout;
  std::uint64_t max = 0;
  bool echo = true;
  bool linger0 = false;
  bool pipeline = false;  // the echo byte goes with the CONNECT (through a proxy)
  unsigned turns = 1;     // echo round trips per tunnel
  Pace pace;
  Clock::time_point start;
  bool keep_each = false;
  std::atomic<std::uint64_t> issued{0};
};

std::uint32_t to_us(Clock::duration d) {
  return static_cast<std::uint32_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

// A short pause after a failure keeps a refused port from turning into a busy loop.
asio::awaitable<void> back_off(Worker& w) {
  co_await sleep_until(w, Clock::now() + std::chrono::milliseconds(1));
}

asio::awaitable<void> slot(Worker& w, Lane& lane, Shared& sh) {
  // On the heap: a coroutine frame this large would skip Asio's frame recycling.
  auto storage = std::make_unique<char[]>(kMaxConnectAnswer);
  char* buf = storage.get();
  while (!w.stopping()) {
    const auto k = sh.issued.fetch_add(1, std::memory_order_relaxed);
    if (k >= sh.max) break;
    if (sh.pace.rate > 0) {
      const auto due = sh.pace.due(k);
      if (due >= sh.end) break;
      co_await sleep_until(w, due);
    }
    auto t0 = Clock::now();
    if (t0 >= sh.end || w.stopping()) break;
    Conn c(w);
    std::size_t extra = 0;
    const bool early = sh.echo && sh.pipeline && sh.route.via_proxy();
    auto st = co_await open_tunnel(c, sh.route, sh.timeout, std::span<char>(buf, kMaxConnectAnswer),
                                   extra, early ? std::string_view("x", 1) : std::string_view());
    if (st != OpenStatus::ok) {
      if (!w.stopping()) count_open_error(lane.errors, st);
      co_await back_off(w);
      continue;
    }
    auto t1 = Clock::now();
    if (sh.echo) {
      // An echo server speaks only when spoken to: nothing may follow the 200 but, when
      // the byte went with the CONNECT, its echo (checked below with the one read here).
      if (extra > (early ? 1u : 0u)) {
        ++lane.errors.protocol;
        continue;
      }
      asio::error_code ec;
      bool echoed = true;
      c.arm(t1, sh.timeout);
      for (unsigned turn = 0; turn < sh.turns && !ec && echoed; ++turn) {
        const bool first = turn == 0;
        if (!(first && early)) {
          buf[0] = 'x';
          co_await asio::async_write(c.socket(), asio::buffer(buf, 1), with_ec(ec));
        }
        if (!ec && !(first && extra == 1))
          co_await asio::async_read(c.socket(), asio::buffer(buf, 1), with_ec(ec));
        echoed = buf[0] == 'x';
      }
      c.disarm();
      if (ec) {
        if (c.timed_out())
          ++lane.errors.timeout;
        else if (!w.stopping())
          ++lane.errors.io;
        continue;
      }
      if (!echoed) {
        ++lane.errors.protocol;
        continue;
      }
    }
    auto t2 = Clock::now();
    lane.setup.add(t1 - t0);
    lane.total.add(t2 - t0);
    if (sh.keep_each) lane.each.push_back({to_us(t0 - sh.start), to_us(t2 - t0), to_us(t1 - t0)});
    ++lane.completed;
    if (sh.linger0) {
      asio::error_code ignored;
      c.socket().set_option(asio::socket_base::linger(true, 0), ignored);
    }
  }
}

// One line per tunnel, in order of start: start_us total_us setup_us. For finding out
// whether the slow tunnels come together (after a stall) or alone.
void write_each(const std::string& path, std::vector<std::array<std::uint32_t, 3>>& each) {
  std::sort(each.begin(), each.end());
  std::ofstream out(path);
  if (!out) throw ConfigError("--samples: cannot write " + path);
  out << "# start_us total_us setup_us\n";
  for (const auto& e : each) out << e[0] << ' ' << e[1] << ' ' << e[2] << '\n';
  if (!out.flush()) throw ConfigError("--samples: writing " + path + " failed");
}

ModeResult run_rate(const RateOptions& o) {
  auto duration = seconds_flag(o.duration_s, "--duration");
  Shared sh;
  sh.timeout = seconds_flag(o.client.timeout_s, "--timeout");
  auto proxy = parse_proxy(o.client.proxy);
  sh.route = make_route(proxy, parse_host_port(o.target));
  sh.max = o.max;
  sh.echo = o.payload == "echo";
  sh.linger0 = o.linger0;
  sh.pipeline = o.pipeline;
  sh.turns = o.turns;
  auto nofile = raise_nofile_limit();
  if (o.concurrency + 64 > nofile)
    throw ConfigError("--concurrency exceeds the fd limit " + std::to_string(nofile));

  Workers ws = make_workers(o.client.threads);
  std::vector<Lane> lanes(ws.size());
  for (auto& lane : lanes) {
    lane.total.reserve(reserve_hint(o.max, ws.size()));
    lane.setup.reserve(reserve_hint(o.max, ws.size()));
  }
  auto start = Clock::now();
  sh.start = start;
  sh.keep_each = !o.samples_path.empty();
  sh.end = start + duration;
  sh.pace = Pace{start, o.rate};
  for (unsigned i = 0; i < o.concurrency; ++i) {
    auto& w = *ws[i % ws.size()];
    w.spawn(slot(w, lanes[w.index()], sh));
  }
  for (auto& w : ws) w->set_hard_stop(sh.end + sh.timeout + std::chrono::seconds(1));
  run_workers(ws, sh.end + sh.timeout + std::chrono::seconds(2));
  double elapsed = seconds_between(start, Clock::now());

  Lane all;
  for (auto& lane : lanes) {
    all.total.merge(lane.total);
    all.setup.merge(lane.setup);
    all.errors.merge(lane.errors);
    all.completed += lane.completed;
    all.each.insert(all.each.end(), lane.each.begin(), lane.each.end());
  }
  if (sh.keep_each) write_each(o.samples_path, all.each);
  nlohmann::ordered_json j;
  j["mode"] = "connect-rate";
  j["parameters"] = {{"proxy", o.client.proxy},
                     {"target", o.target},
                     {"concurrency", o.concurrency},
                     {"duration_s", o.duration_s},
                     {"max", o.max},
                     {"payload", o.payload},
                     {"linger0", o.linger0},
                     {"pipeline", o.pipeline},
                     {"turns", o.turns},
                     {"rate", o.rate},
                     {"threads", o.client.threads},
                     {"timeout_s", o.client.timeout_s}};
  j["results"] = {{"elapsed_s", elapsed},
                  {"tunnels", all.completed},
                  {"tunnels_per_s", static_cast<double>(all.completed) / elapsed},
                  {"latency_us", all.total.summary()},
                  {"setup_latency_us", all.setup.summary()},
                  {"stopped_by_signal", stop_requested()}};
  j["errors"] = all.errors.to_json();
  j["cpu"] = cpu_usage();
  return {j, all.completed > 0};
}

}  // namespace

void add_connect_rate(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<RateOptions>();
  auto* cmd = app.add_subcommand(
      "connect-rate",
      "Short tunnels in C parallel slots: connect, CONNECT, wait for 200, then (payload echo) "
      "one byte to an echo server and back, close. Reports tunnels/s and latency percentiles "
      "from the start of the TCP connect.");
  add_client_flags(*cmd, o->client);
  cmd->add_option("--target", o->target, "Target HOST:PORT (a serve --kind echo)")->required();
  cmd->add_option("--concurrency", o->concurrency, "Tunnels in flight")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Seconds to run")->capture_default_str();
  cmd->add_option("--max", o->max, "Stop after this many tunnels (bounds the sample memory)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{100'000'000}))
      ->capture_default_str();
  cmd->add_option("--payload", o->payload,
                  "echo: 1 byte round trip through the tunnel; none: stop at the 200 "
                  "(direct: at the TCP connect)")
      ->check(CLI::IsMember({"echo", "none"}))
      ->capture_default_str();
  cmd->add_option("--turns", o->turns,
                  "echo: round trips of one byte per tunnel, each a short read for the proxy "
                  "both ways")
      ->check(CLI::Range(1u, 10000u))
      ->capture_default_str();
  cmd->add_option("--rate", o->rate,
                  "Offered load: tunnels started per second across all slots (0: as fast as "
                  "the slots go)")
      ->check(CLI::Range(0.0, 10'000'000.0))
      ->capture_default_str();
  cmd->add_flag("--pipeline", o->pipeline,
                "Send the echo byte with the CONNECT, before the 200, so that the client waits "
                "once as a relay's client does (no effect without --proxy)");
  cmd->add_option("--samples", o->samples_path,
                  "Also write each tunnel's start and latencies (µs), one line each, to this file");
  cmd->add_flag("--linger0", o->linger0,
                "Close with RST (SO_LINGER 0) so the client leaves no TIME_WAIT behind");
  cmd->callback([o, &runner] { runner = [o] { return run_rate(*o); }; });
}

}  // namespace vibepit::bench
