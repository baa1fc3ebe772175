// `serve`: fast upstream servers (discard, source, echo, http) so that the upstream is never
// the bottleneck of a benchmark. One acceptor on worker 0 hands sockets out round robin.
#include "common.hpp"
#include "modes.hpp"
#include "worker.hpp"

#include <algorithm>
#include <iostream>
#include <memory>

namespace vibepit::bench {

namespace {

constexpr std::size_t kBulk = 64 * 1024;

enum class Kind { discard, source, echo, http };

struct ServeOptions {
  std::string listen;
  std::string kind = "discard";
  unsigned threads = 1;
  double duration_s = 3600;
  std::uint64_t max_connections = 100'000'000;
  std::size_t body_size = 13;
};

struct ServeStats {
  std::uint64_t connections = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t requests = 0;
  std::uint64_t bad_requests = 0;
};

// Read-only data shared by every connection of the process.
struct Shared {
  Kind kind = Kind::discard;
  std::unique_ptr<char[]> pattern;  // source: 64 KiB of a repeating pattern
  std::string responses;            // http: kBatch copies of the response
  std::size_t response_size = 0;
};

constexpr std::size_t kBatch = 16;

// One per worker: a discard connection reads into it; the bytes are dropped anyway.
struct WorkerState {
  ServeStats stats;
  std::unique_ptr<char[]> scratch = std::make_unique<char[]>(kBulk);
};

asio::awaitable<void> serve_discard(Conn& c, WorkerState& ws) {
  asio::error_code ec;
  for (;;) {
    std::size_t n =
        co_await c.socket().async_read_some(asio::buffer(ws.scratch.get(), kBulk), with_ec(ec));
    if (ec) co_return;
    ws.stats.bytes_in += n;
  }
}

asio::awaitable<void> serve_source(Conn& c, WorkerState& ws, const Shared& sh) {
  asio::error_code ec;
  for (;;) {
    std::size_t n =
        co_await c.socket().async_write_some(asio::buffer(sh.pattern.get(), kBulk), with_ec(ec));
    if (ec) co_return;
    ws.stats.bytes_out += n;
  }
}

// Starts with a small buffer so that thousands of idle echo connections stay cheap; switches
// to a bulk buffer on the first full read.
asio::awaitable<void> serve_echo(Conn& c, WorkerState& ws) {
  char small[512];
  std::unique_ptr<char[]> big;
  asio::mutable_buffer buf(small, sizeof small);
  asio::error_code ec;
  for (;;) {
    std::size_t n = co_await c.socket().async_read_some(buf, with_ec(ec));
    if (ec) co_return;
    ws.stats.bytes_in += n;
    co_await asio::async_write(c.socket(), asio::buffer(buf.data(), n), with_ec(ec));
    if (ec) co_return;
    ws.stats.bytes_out += n;
    if (!big && n == buf.size()) {
      big = std::make_unique<char[]>(kBulk);
      buf = asio::buffer(big.get(), kBulk);
    }
  }
}

// Minimal HTTP/1.1 keep-alive: every "\r\n\r\n" ends a request; bodies are not expected.
asio::awaitable<void> serve_http(Conn& c, WorkerState& ws, const Shared& sh) {
  constexpr std::size_t kHead = 8192;
  auto buf = std::make_unique<char[]>(kHead);
  std::size_t have = 0;
  asio::error_code ec;
  for (;;) {
    if (have == kHead) {
      ++ws.stats.bad_requests;  // a head larger than we accept
      co_return;
    }
    std::size_t n = co_await c.socket().async_read_some(
        asio::buffer(buf.get() + have, kHead - have), with_ec(ec));
    if (ec) co_return;
    ws.stats.bytes_in += n;
    std::size_t scan_from = have >= 3 ? have - 3 : 0;
    have += n;
    std::string_view view(buf.get(), have);
    std::size_t consumed = 0;
    std::size_t complete = 0;
    for (auto end = view.find("\r\n\r\n", scan_from); end != std::string_view::npos;
         end = view.find("\r\n\r\n", consumed)) {
      consumed = end + 4;
      ++complete;
    }
    if (consumed) {
      std::copy(buf.get() + consumed, buf.get() + have, buf.get());
      have -= consumed;
    }
    ws.stats.requests += complete;
    while (complete) {
      std::size_t k = std::min(complete, kBatch);
      co_await asio::async_write(
          c.socket(), asio::buffer(sh.responses.data(), k * sh.response_size), with_ec(ec));
      if (ec) co_return;
      ws.stats.bytes_out += k * sh.response_size;
      complete -= k;
    }
  }
}

asio::awaitable<void> serve_conn(Worker& w, tcp::socket s, WorkerState& ws, const Shared& sh) {
  Conn c(w, std::move(s));
  ++ws.stats.connections;
  asio::error_code ignored;
  c.socket().set_option(tcp::no_delay(true), ignored);
  switch (sh.kind) {
    case Kind::discard:
      co_await serve_discard(c, ws);
      break;
    case Kind::source:
      co_await serve_source(c, ws, sh);
      break;
    case Kind::echo:
      co_await serve_echo(c, ws);
      break;
    case Kind::http:
      co_await serve_http(c, ws, sh);
      break;
  }
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, Workers& ws,
                                  std::vector<WorkerState>& states, const Shared& sh,
                                  std::uint64_t max_connections, std::uint64_t& accepted,
                                  std::uint64_t& accept_errors) {
  Worker& self = *ws[0];
  std::size_t next = 0;
  while (!self.stopping() && accepted < max_connections) {
    Worker& target = *ws[next];
    next = (next + 1) % ws.size();
    asio::error_code ec;
    tcp::socket s = co_await acceptor.async_accept(target.ioc(), with_ec(ec));
    if (ec) {
      if (!acceptor.is_open()) co_return;
      // EMFILE and friends: back off instead of spinning.
      ++accept_errors;
      asio::steady_timer pause(self.ioc(), std::chrono::milliseconds(10));
      co_await pause.async_wait(with_ec(ec));
      continue;
    }
    ++accepted;
    asio::post(target.ioc(),
               [&target, &state = states[target.index()], &sh, sock = std::move(s)]() mutable {
                 if (target.stopping()) return;
                 target.spawn(serve_conn(target, std::move(sock), state, sh));
               });
  }
  // At the cap: refuse the clients that come later rather than leave them queued unanswered.
  asio::error_code ignored;
  acceptor.close(ignored);
}

Kind parse_kind(const std::string& k) {
  if (k == "discard") return Kind::discard;
  if (k == "source") return Kind::source;
  if (k == "echo") return Kind::echo;
  return Kind::http;
}

ModeResult run_serve(const ServeOptions& o) {
  auto duration = seconds_flag(o.duration_s, "--duration", 7 * 86400.0);
  auto listen = parse_host_port(o.listen, /*allow_port_zero=*/true);
  auto nofile = raise_nofile_limit();

  Shared sh;
  sh.kind = parse_kind(o.kind);
  sh.pattern = std::make_unique<char[]>(kBulk);
  for (std::size_t i = 0; i < kBulk; ++i) sh.pattern[i] = static_cast<char>('a' + i % 26);
  std::string body(o.body_size, 'x');
  if (!body.empty()) body.back() = '\n';
  std::string response = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body;
  sh.response_size = response.size();
  for (std::size_t i = 0; i < kBatch; ++i) sh.responses += response;

  Workers ws = make_workers(o.threads);
  std::vector<WorkerState> states(ws.size());
  tcp::acceptor acceptor(ws[0]->ioc());
  auto ep = resolve_endpoint(listen, /*passive=*/true);
  try {
    acceptor.open(ep.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(asio::socket_base::max_listen_connections);
  } catch (const std::system_error& e) {
    throw ConfigError("cannot listen on " + listen.text() + ": " + e.what());
  }
  auto bound = endpoint_text(acceptor.local_endpoint());
  std::cerr << "listening " << bound << std::endl;

  auto start = Clock::now();
  auto stop_at = start + duration;
  std::uint64_t accepted = 0;
  std::uint64_t accept_errors = 0;
  for (auto& w : ws) {
    w->set_keep_alive(true);
    w->set_hard_stop(stop_at);
  }
  ws[0]->on_stop([&acceptor] {
    asio::error_code ignored;
    acceptor.close(ignored);
  });
  ws[0]->spawn(accept_loop(acceptor, ws, states, sh, o.max_connections, accepted, accept_errors));
  run_workers(ws, stop_at + std::chrono::seconds(5));
  auto elapsed = seconds_between(start, Clock::now());

  ServeStats total;
  for (auto& s : states) {
    total.connections += s.stats.connections;
    total.bytes_in += s.stats.bytes_in;
    total.bytes_out += s.stats.bytes_out;
    total.requests += s.stats.requests;
    total.bad_requests += s.stats.bad_requests;
  }
  nlohmann::ordered_json j;
  j["mode"] = "serve";
  j["parameters"] = {{"listen", o.listen},
                     {"bound", bound},
                     {"kind", o.kind},
                     {"threads", o.threads},
                     {"duration_s", o.duration_s},
                     {"max_connections", o.max_connections},
                     {"body_size", o.body_size},
                     {"nofile_limit", nofile}};
  j["results"] = {{"elapsed_s", elapsed},
                  {"connections", total.connections},
                  {"accept_errors", accept_errors},
                  {"bytes_in", total.bytes_in},
                  {"bytes_out", total.bytes_out},
                  {"gbit_per_s_in", total.bytes_in * 8 / elapsed / 1e9},
                  {"gbit_per_s_out", total.bytes_out * 8 / elapsed / 1e9},
                  {"requests", total.requests},
                  {"bad_requests", total.bad_requests},
                  {"stopped_by_signal", stop_requested()}};
  j["cpu"] = cpu_usage();
  return {j, true};
}

}  // namespace

void add_serve(CLI::App& app, Runner& runner) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Fast upstream server: discard (read and drop), source (write a pattern until the peer "
      "closes), echo, http (200 with a small body, keep-alive). Prints 'listening ADDR:PORT' on "
      "stderr; runs until SIGINT/SIGTERM or --duration, then prints its JSON result.");
  cmd->add_option("--listen", o->listen, "ADDR:PORT to listen on (port 0 picks one)")->required();
  cmd->add_option("--kind", o->kind, "discard|source|echo|http")
      ->check(CLI::IsMember({"discard", "source", "echo", "http"}))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "I/O threads (one io_context each)")
      ->check(CLI::Range(1u, 256u))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Stop after this many seconds")
      ->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "Stop accepting after this many connections and close the listener, so that "
                  "later clients are refused")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--body-size", o->body_size, "http: bytes of the response body")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 20))
      ->capture_default_str();
  cmd->callback([o, &runner] { runner = [o] { return run_serve(*o); }; });
}

}  // namespace vibepit::bench
