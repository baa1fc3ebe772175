// `http-rps`: keep-alive GETs on C connections, absolute-form through the proxy or
// origin-form directly. One request in flight per connection; latency per request.
#include "http_response.hpp"
#include "modes.hpp"
#include "tunnel.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace vibepit::bench {

namespace {

constexpr std::size_t kBuf = 16 * 1024;

struct RpsOptions {
  ClientFlags client;
  std::string url;
  unsigned connections = 16;
  double duration_s = 10;
  std::uint64_t max = 5'000'000;
  double rate = 0;
};

struct Lane {
  Samples latency;
  Errors errors;
  std::uint64_t completed = 0;
  std::uint64_t non200 = 0;
  std::uint64_t connects = 0;
  std::uint64_t closed_idle = 0;
  std::uint64_t body_bytes = 0;
};

struct Shared {
  Route route;  // to the proxy or the origin; never a CONNECT
  std::string request;
  Clock::time_point end;
  Clock::duration timeout;
  std::uint64_t max = 0;
  Pace pace;
  std::atomic<std::uint64_t> issued{0};
};

enum class Outcome { keep, reconnect, failed, closed_idle };

// A peer that closes a used keep-alive connection without saying so (tinyproxy does) shows up
// as EOF or reset before the first byte of the next response. Like any HTTP client, retry on a
// new connection; count it apart from errors.
bool closed_while_idle(const asio::error_code& ec, bool reused, std::size_t have) {
  return reused && have == 0 &&
         (ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::broken_pipe);
}

// Keeps a failing proxy from turning into a busy loop of reconnects.
asio::awaitable<void> back_off(Worker& w) {
  co_await sleep_until(w, Clock::now() + std::chrono::milliseconds(10));
}

Outcome io_failure(Conn& c, Lane& lane) {
  if (c.timed_out())
    ++lane.errors.timeout;
  else if (!c.worker().stopping())
    ++lane.errors.io;
  return Outcome::failed;
}

// One request and its response. buf[0, have) holds bytes already read on this connection.
asio::awaitable<Outcome> exchange(Conn& c, Lane& lane, const Shared& sh, char* buf,
                                  std::size_t& have, Clock::time_point t0, bool reused) {
  asio::error_code ec;
  c.arm(t0, sh.timeout);
  co_await asio::async_write(c.socket(), asio::buffer(sh.request), with_ec(ec));
  if (closed_while_idle(ec, reused, have)) co_return Outcome::closed_idle;
  if (ec) co_return io_failure(c, lane);

  std::size_t head_end = std::string_view(buf, have).find("\r\n\r\n");
  while (head_end == std::string_view::npos) {
    if (have == kBuf) {
      ++lane.errors.protocol;  // head larger than the buffer
      co_return Outcome::failed;
    }
    std::size_t from = have >= 3 ? have - 3 : 0;
    std::size_t n =
        co_await c.socket().async_read_some(asio::buffer(buf + have, kBuf - have), with_ec(ec));
    if (closed_while_idle(ec, reused, have)) co_return Outcome::closed_idle;
    if (ec) co_return io_failure(c, lane);
    have += n;
    head_end = std::string_view(buf, have).find("\r\n\r\n", from);
  }
  auto head = parse_response_head(std::string_view(buf, head_end + 4));
  if (!head || head->chunked) {
    ++lane.errors.protocol;  // chunked bodies are not supported by this client
    co_return Outcome::failed;
  }
  std::size_t body_start = head_end + 4;
  std::size_t avail = have - body_start;
  Outcome next = head->close ? Outcome::reconnect : Outcome::keep;

  if (head->until_close()) {
    lane.body_bytes += avail;
    for (;;) {
      std::size_t n = co_await c.socket().async_read_some(asio::buffer(buf, kBuf), with_ec(ec));
      lane.body_bytes += n;
      if (ec == asio::error::eof) break;
      if (ec) co_return io_failure(c, lane);
    }
    next = Outcome::reconnect;
    have = 0;
  } else {
    std::uint64_t need = head->body_length();
    lane.body_bytes += need;
    if (avail >= need) {
      have = avail - need;  // pipelined leftovers; we never pipeline, but keep them
      std::memmove(buf, buf + body_start + need, have);
    } else {
      need -= avail;
      have = 0;
      while (need) {
        std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(need, kBuf));
        std::size_t n = co_await c.socket().async_read_some(asio::buffer(buf, want), with_ec(ec));
        if (ec) co_return io_failure(c, lane);
        need -= n;
      }
    }
  }
  c.disarm();
  lane.latency.add(Clock::now() - t0);
  ++lane.completed;
  if (head->status != 200) ++lane.non200;
  co_return next;
}

asio::awaitable<void> connection(Worker& w, Lane& lane, Shared& sh) {
  auto buf = std::make_unique<char[]>(kBuf);
  bool done = false;
  while (!done && !w.stopping() && Clock::now() < sh.end) {
    Conn c(w);
    std::size_t have = 0;
    auto st = co_await open_tunnel(c, sh.route, sh.timeout, std::span<char>(buf.get(), kBuf), have);
    if (st != OpenStatus::ok) {
      if (!w.stopping()) count_open_error(lane.errors, st);
      co_await back_off(w);
      continue;
    }
    ++lane.connects;
    for (bool reused = false;; reused = true) {
      const auto k = sh.issued.fetch_add(1, std::memory_order_relaxed);
      if (k >= sh.max || (sh.pace.rate > 0 && sh.pace.due(k) >= sh.end)) {
        done = true;
        break;
      }
      if (sh.pace.rate > 0) co_await sleep_until(w, sh.pace.due(k));
      auto t0 = Clock::now();
      if (t0 >= sh.end || w.stopping()) {
        done = true;
        break;
      }
      auto outcome = co_await exchange(c, lane, sh, buf.get(), have, t0, reused);
      if (outcome == Outcome::closed_idle) ++lane.closed_idle;
      if (outcome != Outcome::keep) break;
    }
  }
}

ModeResult run_rps(const RpsOptions& o) {
  auto duration = seconds_flag(o.duration_s, "--duration");
  Shared sh;
  sh.timeout = seconds_flag(o.client.timeout_s, "--timeout");
  auto proxy = parse_proxy(o.client.proxy);
  auto url = parse_url(o.url);
  auto authority = url.authority.text();
  sh.route.first_hop = resolve_endpoint(proxy ? *proxy : url.authority);
  sh.request = "GET " + (proxy ? "http://" + authority + url.path : url.path) +
               " HTTP/1.1\r\nHost: " + authority +
               "\r\nUser-Agent: vibepit-bench\r\nAccept: */*\r\n" +
               (proxy ? proxy_auth_field(o.client) : std::string()) + "\r\n";
  sh.max = o.max;
  auto nofile = raise_nofile_limit();
  if (o.connections + 64 > nofile)
    throw ConfigError("--connections exceeds the fd limit " + std::to_string(nofile));

  Workers ws = make_workers(o.client.threads);
  std::vector<Lane> lanes(ws.size());
  for (auto& lane : lanes) lane.latency.reserve(reserve_hint(o.max, ws.size()));
  auto start = Clock::now();
  sh.end = start + duration;
  sh.pace = Pace{start, o.rate};
  for (unsigned i = 0; i < o.connections; ++i) {
    auto& w = *ws[i % ws.size()];
    w.spawn(connection(w, lanes[w.index()], sh));
  }
  for (auto& w : ws) w->set_hard_stop(sh.end + sh.timeout + std::chrono::seconds(1));
  run_workers(ws, sh.end + sh.timeout + std::chrono::seconds(2));
  double elapsed = seconds_between(start, Clock::now());

  Lane all;
  for (auto& lane : lanes) {
    all.latency.merge(lane.latency);
    all.errors.merge(lane.errors);
    all.completed += lane.completed;
    all.non200 += lane.non200;
    all.connects += lane.connects;
    all.closed_idle += lane.closed_idle;
    all.body_bytes += lane.body_bytes;
  }
  nlohmann::ordered_json j;
  j["mode"] = "http-rps";
  j["parameters"] = {{"proxy", o.client.proxy},
                     {"url", o.url},
                     {"connections", o.connections},
                     {"duration_s", o.duration_s},
                     {"max", o.max},
                     {"rate", o.rate},
                     {"threads", o.client.threads},
                     {"timeout_s", o.client.timeout_s}};
  j["results"] = {{"elapsed_s", elapsed},
                  {"requests", all.completed},
                  {"requests_per_s", static_cast<double>(all.completed) / elapsed},
                  {"non200", all.non200},
                  {"connects", all.connects},
                  {"closed_idle_retries", all.closed_idle},
                  {"body_bytes", all.body_bytes},
                  {"latency_us", all.latency.summary()},
                  {"stopped_by_signal", stop_requested()}};
  j["errors"] = all.errors.to_json();
  j["cpu"] = cpu_usage();
  return {j, all.completed > 0};
}

}  // namespace

void add_http_rps(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<RpsOptions>();
  auto* cmd = app.add_subcommand(
      "http-rps",
      "Keep-alive HTTP/1.1 GETs on C connections: absolute-form through --proxy, origin-form "
      "with --proxy none. Bodies are framed by Content-Length (or the close of the "
      "connection); chunked responses count as protocol errors.");
  add_client_flags(*cmd, o->client);
  cmd->add_option("--url", o->url, "http://HOST:PORT/path (a serve --kind http)")->required();
  cmd->add_option("--connections", o->connections, "Keep-alive connections")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Seconds to run")->capture_default_str();
  cmd->add_option("--max", o->max, "Stop after this many requests (bounds the sample memory)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{100'000'000}))
      ->capture_default_str();
  cmd->add_option("--rate", o->rate,
                  "Offered load: requests started per second across all connections (0: as "
                  "fast as the connections go)")
      ->check(CLI::Range(0.0, 10'000'000.0))
      ->capture_default_str();
  cmd->callback([o, &runner] { runner = [o] { return run_rps(*o); }; });
}

}  // namespace vibepit::bench
