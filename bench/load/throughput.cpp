// `connect-throughput`: N long tunnels (or direct connections) pushing bulk bytes for S
// seconds. Opening all streams is a separate phase so that they start measuring together.
#include "modes.hpp"
#include "tunnel.hpp"

#include <algorithm>
#include <cmath>

namespace vibepit::bench {

namespace {

constexpr std::size_t kBulk = 64 * 1024;
constexpr unsigned kOpenersPerWorker = 64;
// Streams not open by then are dropped from the run; bounds the opening phase.
constexpr auto kOpenPhase = std::chrono::seconds(60);

struct ThroughputOptions {
  ClientFlags client;
  std::string target;
  unsigned streams = 1;
  double duration_s = 10;
  std::string direction = "up";
  std::uint64_t max_bytes = std::uint64_t{1} << 40;
};

struct Stream {
  std::unique_ptr<Conn> conn;
  bool open = false;
  std::uint64_t bytes = 0;
  Clock::time_point finished{};
};

// Per worker: its streams, counters and buffers (the down direction drops what it reads,
// so every stream of a worker can share one scratch buffer).
struct Lane {
  std::vector<Stream> streams;
  std::size_t next_to_open = 0;
  Errors errors;
  std::unique_ptr<char[]> buf = std::make_unique<char[]>(kBulk);
};

// Opens the worker's streams one after the other; a few of these run side by side.
asio::awaitable<void> opener(Lane& lane, const Route& route, Clock::duration timeout,
                             Clock::time_point open_end) {
  // On the heap: a coroutine frame this large would skip Asio's frame recycling.
  auto answer = std::make_unique<char[]>(kMaxConnectAnswer);
  while (lane.next_to_open < lane.streams.size() && Clock::now() < open_end) {
    Stream& s = lane.streams[lane.next_to_open++];
    if (s.conn->worker().stopping()) break;
    std::size_t extra = 0;
    auto st = co_await open_tunnel(*s.conn, route, timeout,
                                   std::span<char>(answer.get(), kMaxConnectAnswer), extra);
    count_open_error(lane.errors, st);
    s.open = st == OpenStatus::ok;
    s.bytes = extra;  // a source may already have sent data behind the 200
    if (!s.open) s.conn->close();
  }
}

asio::awaitable<void> pump(Stream& s, Lane& lane, bool up, Clock::time_point end,
                           Clock::duration timeout, std::uint64_t max_bytes) {
  Conn& c = *s.conn;
  asio::error_code ec;
  for (;;) {
    auto now = Clock::now();
    if (now >= end || s.bytes >= max_bytes) break;
    c.arm(now, timeout);
    std::size_t n =
        up ? co_await c.socket().async_write_some(asio::buffer(lane.buf.get(), kBulk), with_ec(ec))
           : co_await c.socket().async_read_some(asio::buffer(lane.buf.get(), kBulk), with_ec(ec));
    s.bytes += n;
    if (ec) {
      if (c.timed_out())
        ++lane.errors.timeout;
      else if (!c.worker().stopping())
        ++lane.errors.io;
      break;
    }
  }
  s.finished = Clock::now();
  c.close();
}

ModeResult run_throughput(const ThroughputOptions& o) {
  auto duration = seconds_flag(o.duration_s, "--duration");
  auto timeout = seconds_flag(o.client.timeout_s, "--timeout");
  auto route = make_route(parse_proxy(o.client.proxy), parse_host_port(o.target),
                          proxy_auth_field(o.client));
  auto nofile = raise_nofile_limit();
  if (o.streams + 64 > nofile)
    throw ConfigError("--streams " + std::to_string(o.streams) + " exceeds the fd limit " +
                      std::to_string(nofile));
  const bool up = o.direction == "up";

  Workers ws = make_workers(o.client.threads);
  std::vector<Lane> lanes(ws.size());
  for (auto& lane : lanes)
    for (std::size_t i = 0; i < kBulk; ++i) lane.buf[i] = static_cast<char>('a' + i % 26);
  for (unsigned i = 0; i < o.streams; ++i) {
    auto& w = *ws[i % ws.size()];
    lanes[w.index()].streams.push_back(Stream{std::make_unique<Conn>(w)});
  }

  // Phase 1: open every stream, kOpenersPerWorker handshakes in flight per worker.
  auto open_start = Clock::now();
  auto open_end = open_start + kOpenPhase;
  for (auto& w : ws) {
    for (unsigned i = 0; i < kOpenersPerWorker; ++i)
      w->spawn(opener(lanes[w->index()], route, timeout, open_end));
    w->set_hard_stop(open_end + timeout + std::chrono::seconds(1));
  }
  run_workers(ws, open_end + timeout + std::chrono::seconds(2));
  auto open_s = seconds_between(open_start, Clock::now());

  // Phase 2: push bytes on every open stream for the duration.
  auto start = Clock::now();
  auto end = start + duration;
  std::size_t established = 0;
  for (auto& w : ws) {
    for (auto& s : lanes[w->index()].streams) {
      if (!s.open) continue;
      ++established;
      w->spawn(pump(s, lanes[w->index()], up, end, timeout, o.max_bytes));
    }
    w->set_hard_stop(end + timeout + std::chrono::seconds(1));
  }
  if (established) run_workers(ws, end + timeout + std::chrono::seconds(2));

  Errors errors;
  std::uint64_t total = 0;
  auto last = start;
  std::vector<double> per_stream;
  for (auto& lane : lanes) {
    errors.merge(lane.errors);
    for (auto& s : lane.streams) {
      if (!s.open) continue;
      total += s.bytes;
      last = std::max(last, s.finished);
      per_stream.push_back(static_cast<double>(s.bytes));
    }
  }
  double elapsed = std::max(seconds_between(start, last), 1e-9);
  for (auto& b : per_stream) b = b * 8 / elapsed / 1e9;
  nlohmann::ordered_json per = {{"count", per_stream.size()}};
  if (!per_stream.empty()) {
    double sum = 0;
    for (double g : per_stream) sum += g;
    double mean = sum / static_cast<double>(per_stream.size());
    double var = 0;
    for (double g : per_stream) var += (g - mean) * (g - mean);
    per["min_gbit_per_s"] = *std::min_element(per_stream.begin(), per_stream.end());
    per["mean_gbit_per_s"] = mean;
    per["max_gbit_per_s"] = *std::max_element(per_stream.begin(), per_stream.end());
    per["stddev_gbit_per_s"] = std::sqrt(var / static_cast<double>(per_stream.size()));
    if (per_stream.size() <= 1024) per["gbit_per_s"] = per_stream;
  }

  nlohmann::ordered_json j;
  j["mode"] = "connect-throughput";
  j["parameters"] = {
      {"proxy", o.client.proxy},         {"target", o.target},       {"streams", o.streams},
      {"duration_s", o.duration_s},      {"direction", o.direction}, {"threads", o.client.threads},
      {"timeout_s", o.client.timeout_s}, {"max_bytes", o.max_bytes}, {"buffer_bytes", kBulk}};
  j["results"] = {{"streams_established", established},
                  {"open_s", open_s},
                  {"elapsed_s", elapsed},
                  {"bytes", total},
                  {"gbit_per_s", total * 8 / elapsed / 1e9},
                  {"per_stream", per},
                  {"stopped_by_signal", stop_requested()}};
  j["errors"] = errors.to_json();
  j["cpu"] = cpu_usage();
  return {j, established > 0};
}

}  // namespace

void add_connect_throughput(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<ThroughputOptions>();
  auto* cmd = app.add_subcommand(
      "connect-throughput",
      "Open N CONNECT tunnels (or direct connections with --proxy none), then push bulk bytes "
      "for S seconds: up writes to a discard server, down reads from a source server.");
  add_client_flags(*cmd, o->client);
  cmd->add_option("--target", o->target, "Target HOST:PORT (a serve --kind discard|source)")
      ->required();
  cmd->add_option("--streams", o->streams, "Parallel tunnels")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Seconds of transfer")->capture_default_str();
  cmd->add_option("--direction", o->direction, "up (client writes) or down (client reads)")
      ->check(CLI::IsMember({"up", "down"}))
      ->capture_default_str();
  cmd->add_option("--max-bytes", o->max_bytes, "Stop a stream after this many bytes")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 50))
      ->capture_default_str();
  cmd->callback([o, &runner] { runner = [o] { return run_throughput(*o); }; });
}

}  // namespace vibepit::bench
