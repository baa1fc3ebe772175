// `connect-rate`: short tunnels. Each of C slots loops: connect, CONNECT, wait for the 200,
// optionally one byte through an echo server and back (--turns times: an interactive
// tunnel, such as a TLS handshake and a request, is a series of short turns), close.
// --payload hello makes the first turn a TLS ClientHello for the target's host, as a
// browser or curl sends it (517 bytes), which the proxy's SNI check reads.
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
  std::string first;  // --payload hello: the first turn's bytes (else one byte)
  bool linger0 = false;
  bool pipeline = false;  // the echo byte goes with the CONNECT (through a proxy)
  unsigned turns = 1;     // echo round trips per tunnel
  Pace pace;
  Clock::time_point start;
  bool keep_each = false;
  std::atomic<std::uint64_t> issued{0};
};

// A TLS 1.3 ClientHello for `host` in one record, laid out as curl's and browsers' are:
// SNI, groups, ALPN, signature algorithms, versions, an X25519 key share, padded to 512
// bytes of message (517 on the wire). The bytes other than the name are fixed: the proxy
// reads only the structure and the name.
std::string client_hello(std::string_view host) {
  auto u16 = [](std::size_t v) { return std::string{char(v >> 8), char(v & 0xff)}; };
  auto ext = [&](unsigned type, const std::string& data) {
    return u16(type) + u16(data.size()) + data;
  };
  std::string suites;
  for (unsigned s : {0x1302u, 0x1303u, 0x1301u, 0xc02cu, 0xc030u, 0x009fu, 0xcca9u, 0xcca8u,
                     0xccaau, 0xc02bu, 0xc02fu, 0x009eu, 0xc024u, 0xc028u, 0x006bu, 0xc023u})
    suites += u16(s);
  std::string sigalgs;
  for (unsigned a : {0x0403u, 0x0503u, 0x0603u, 0x0807u, 0x0808u, 0x0804u, 0x0805u, 0x0806u,
                     0x0401u, 0x0501u, 0x0601u})
    sigalgs += u16(a);
  const std::string name(host);
  std::string exts = ext(0, u16(name.size() + 3) + std::string(1, '\0') + u16(name.size()) + name) +
                     ext(0x0b, std::string("\x03\x00\x01\x02", 4)) +
                     ext(0x0a, u16(6) + u16(0x001d) + u16(0x0017) + u16(0x0018)) + ext(0x23, "") +
                     ext(0x10, u16(12) + "\x02h2\x08http/1.1") + ext(0x16, "") + ext(0x17, "") +
                     ext(0x0d, u16(sigalgs.size()) + sigalgs) +
                     ext(0x2b, std::string("\x04\x03\x04\x03\x03", 5)) +
                     ext(0x2d, std::string("\x01\x01", 2)) +
                     ext(0x33, u16(36) + u16(0x001d) + u16(32) + std::string(32, '\x42'));
  std::string body = std::string("\x03\x03", 2) + std::string(32, '\x5a') + '\x20' +
                     std::string(32, '\x33') + u16(suites.size()) + suites +
                     std::string("\x01\x00", 2);
  // Padding (RFC 7685) brings the message to 512 bytes; its own header is 4.
  const std::size_t unpadded = 4 + body.size() + 2 + exts.size();
  if (unpadded + 4 < 512) exts += ext(0x15, std::string(512 - unpadded - 4, '\0'));
  body += u16(exts.size()) + exts;
  const std::string message = std::string(1, '\x01') + '\0' + u16(body.size()) + body;
  return std::string("\x16\x03\x01", 3) + u16(message.size()) + message;
}

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
        if (first && !sh.first.empty()) {  // a ClientHello, echoed whole
          co_await asio::async_write(c.socket(), asio::buffer(sh.first), with_ec(ec));
          if (!ec) {
            co_await asio::async_read(c.socket(), asio::buffer(buf, sh.first.size()), with_ec(ec));
          }
          echoed = std::string_view(buf, sh.first.size()) == sh.first;
          continue;
        }
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
  sh.route = make_route(proxy, parse_host_port(o.target), proxy_auth_field(o.client));
  sh.max = o.max;
  sh.echo = o.payload != "none";
  if (o.payload == "hello") {
    if (o.pipeline) throw ConfigError("--payload hello goes after the 200: not with --pipeline");
    sh.first = client_hello(parse_host_port(o.target).host);
  }
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
                  "echo: 1 byte round trip through the tunnel; hello: a TLS ClientHello "
                  "for the target's host (517 bytes) as the first round trip; none: stop at "
                  "the 200 (direct: at the TCP connect)")
      ->check(CLI::IsMember({"echo", "hello", "none"}))
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
