#pragma once
// Component test of one client connection, the way Beast tests its streams: a real Session
// on a real Worker, whose two ways out (lookup and connect) are fakes, and whose client and
// upstream connections are in-memory socket pairs (AF_UNIX: no network, no root). The test
// writes a client's bytes, reads what the proxy answers, plays the upstream server, and
// sees every name looked up, every address dialled and every decision record.

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/local/connect_pair.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "vibepit/proxy/session.hpp"
#include "vibepit/proxy/worker.hpp"
#include "vibepit/runtime/endpoint.hpp"
#include "vibepit/runtime/pending.hpp"

namespace vibepit::proxy::session_fixture {

using asio::ip::tcp;
using Local = asio::local::stream_protocol::socket;
using namespace std::chrono_literals;
using policy::IpAddr;
using policy::Reason;
using policy::Verdict;

inline IpAddr ip(std::string_view text) {
  return *IpAddr::parse(text);
}

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    cfg.upstream_dns = {config::Endpoint{ip("127.0.0.1"), 9}};  // never asked: lookup is faked
    cfg.splice = config::SpliceMode::off;
    log.set_observer([this](const decision_log::DecisionRecord& r) {
      std::lock_guard lock(mu);
      records_.push_back(r);
    });
    w = std::make_unique<Worker>(cfg, store, producer, active, &pending);
    log.start();
    w->set_outside(
        [this](std::string host) -> asio::awaitable<ResolveResult> {
          looked_up.push_back(host);
          auto it = names.find(host);
          if (it != names.end()) co_return it->second;
          ResolveResult r;
          r.error = "NXDOMAIN";
          co_return r;
        },
        [this](tcp::socket& s, tcp::endpoint to) -> asio::awaitable<asio::error_code> {
          const auto addr = to.address().to_string();
          dialled.push_back(policy::join_host_port(addr, to.port()));
          if (refused.count(addr)) co_return asio::error::connection_refused;
          Local near(w->io()), far(w->io());
          asio::local::connect_pair(near, far);
          s = tcp::socket(w->io());
          s.assign(to.protocol(), near.release());
          servers.push_back(std::move(far));
          co_return asio::error_code{};
        });
  }

  ~SessionTest() override {
    log.stop();
    servers.clear();  // their sockets belong to the worker's loop: close them first
    w.reset();        // destroys pending sessions while the worker's loop still exists
  }

  void rules(std::vector<std::string> allow_http, std::vector<std::string> block_cidr = {}) {
    policy::RuleSet r;
    r.allow_http = std::move(allow_http);
    r.block_cidr = std::move(block_cidr);
    auto compiled = policy::compile(r, 0);
    store.publish(std::const_pointer_cast<policy::Snapshot>(
        std::get<std::shared_ptr<const policy::Snapshot>>(compiled)));
  }

  // A client connects: a session starts on the far end of a new socket pair.
  Local connect_client() {
    Local mine(w->io()), theirs(w->io());
    asio::local::connect_pair(mine, theirs);
    tcp::socket s(w->io());
    s.assign(tcp::v4(), theirs.release());
    active.fetch_add(1);
    std::make_shared<Session>(*w, std::move(s), runtime::to_tcp_endpoint(ip("127.0.0.1"), 40000))
        ->start();
    return mine;
  }

  // Run `script` on the worker's loop until it ends (at most 5 s).
  void play(std::function<asio::awaitable<void>()> script) {
    bool done = false;
    std::exception_ptr failure;
    w->io().restart();  // a loop that ran out of work before stays stopped until restarted
    asio::co_spawn(
        w->io(),
        [&]() -> asio::awaitable<void> {
          try {
            co_await script();
          } catch (...) {
            failure = std::current_exception();
          }
          done = true;
        },
        asio::detached);
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!done && std::chrono::steady_clock::now() < until) w->io().run_one_for(100ms);
    ASSERT_TRUE(done) << "the exchange did not finish within 5 s";
    if (failure) std::rethrow_exception(failure);
  }

  // One request on a new connection, and everything the proxy answers until it closes the
  // connection (as it does after a refused CONNECT or a malformed request).
  std::string refused_whole(std::string_view request) {
    std::string reply;
    play([&]() -> asio::awaitable<void> {
      Local c = connect_client();
      co_await asio::async_write(c, asio::buffer(request), asio::use_awaitable);
      asio::error_code ec;
      co_await asio::async_read(c, asio::dynamic_buffer(reply),
                                asio::redirect_error(asio::use_awaitable, ec));
    });
    return reply;
  }

  // Wait until the proxy has made an upstream connection (the script fails by time-out if
  // it never does).
  asio::awaitable<void> upstream_connected() {
    while (servers.empty()) co_await asio::post(w->io(), asio::use_awaitable);
  }

  // Let the sessions finish what the script left them (closes, last records).
  void settle() {
    for (int i = 0; i < 50 && w->io().poll() > 0;) ++i;
  }

  std::vector<decision_log::DecisionRecord> records() {
    settle();
    log.stop();
    std::lock_guard lock(mu);
    return records_;
  }

  config::ProxyConfig cfg;
  policy::SnapshotStore store{nullptr};
  decision_log::DecisionLog log{"", 1024};
  decision_log::DecisionLog::Producer& producer = log.make_producer();
  std::atomic<std::size_t> active{0};
  runtime::PendingTable pending;  // ask mode: off until a test turns it on
  std::unique_ptr<Worker> w;

  std::map<std::string, ResolveResult> names;  // what the fake lookup answers
  std::set<std::string> refused;               // addresses whose dial is refused
  std::vector<std::string> looked_up;
  std::vector<std::string> dialled;  // "addr:port", in order
  std::vector<Local> servers;        // the far end of each upstream connection made

 private:
  std::mutex mu;
  std::vector<decision_log::DecisionRecord> records_;
};

inline ResolveResult resolves_to(std::initializer_list<std::string_view> addrs) {
  ResolveResult r;
  r.ok = true;
  for (auto a : addrs) r.addrs.push_back(ip(a));
  return r;
}

inline asio::awaitable<void> write(Local& s, std::string_view bytes) {
  co_await asio::async_write(s, asio::buffer(bytes), asio::use_awaitable);
}

// Read up to and including `delim` (a response or request head); the rest stays in `buf`.
inline asio::awaitable<std::string> read_until(Local& s, std::string& buf, std::string_view delim) {
  asio::error_code ec;
  auto n = co_await asio::async_read_until(s, asio::dynamic_buffer(buf), delim,
                                           asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return std::string("<") + ec.message() + "> " + buf;
  std::string out = buf.substr(0, n);
  buf.erase(0, n);
  co_return out;
}

inline asio::awaitable<std::string> read_exactly(Local& s, std::string& buf, std::size_t n) {
  if (buf.size() < n) {
    co_await asio::async_read(s, asio::dynamic_buffer(buf), asio::transfer_at_least(n - buf.size()),
                              asio::use_awaitable);
  }
  std::string out = buf.substr(0, n);
  buf.erase(0, n);
  co_return out;
}

inline std::string header(const std::string& response, std::string_view name) {
  auto pos = response.find("\r\n" + std::string(name) + ": ");
  if (pos == std::string::npos) return "";
  pos += 4 + name.size();
  return response.substr(pos, response.find("\r\n", pos) - pos);
}

}  // namespace vibepit::proxy::session_fixture
