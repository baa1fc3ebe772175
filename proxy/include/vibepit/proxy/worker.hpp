#pragma once
// One I/O thread's share of the proxy: its event loop, its acceptors, its sessions, its
// resolver and its decision log. A connection lives on one worker from accept to close and
// shares nothing mutable with other workers; the only cross-thread state is the count of
// open connections (max-connections). ProxyServer owns the workers and their threads.
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>
#include <asio/error_code.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "vibepit/config/config.hpp"
#include "vibepit/decision_log/decision_log.hpp"
#include "vibepit/decision_log/folding_log.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/proxy/block_pool.hpp"
#include "vibepit/proxy/byte_buffer.hpp"
#include "vibepit/proxy/resolver.hpp"
#include "vibepit/proxy/spares.hpp"
#include "vibepit/runtime/accept_loop.hpp"
#include "vibepit/runtime/loop.hpp"
#include "vibepit/runtime/pending.hpp"

namespace vibepit::proxy {

class Inspection;
class Session;

// How a worker reaches the outside: `lookup` resolves a name its resolver has not cached,
// `connect` opens an upstream TCP connection. Both are the real thing (c-ares, the kernel)
// unless a component test replaces them (tests/unit/proxy/session_test.cpp) to see every
// name looked up and every address dialled, with no network and no root.
using LookupFn = std::function<asio::awaitable<ResolveResult>(std::string host)>;
using ConnectFn = std::function<asio::awaitable<asio::error_code>(asio::ip::tcp::socket& socket,
                                                                  asio::ip::tcp::endpoint to)>;

class Worker {
 public:
  // `active`: connections open across all workers, shared by them. `pending`: ask mode's
  // table of held requests, shared with the other workers and the control API; without
  // one, nothing is ever held.
  Worker(const config::ProxyConfig& cfg, policy::SnapshotStore& store,
         decision_log::DecisionLog::Producer& producer, std::atomic<std::size_t>& active,
         runtime::PendingTable* pending = nullptr);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // ---- What ProxyServer does with it.

  // Listen on `want` with SO_REUSEPORT, so every worker has its own accept queue on one
  // port. Returns the bound endpoint (port 0 resolved). On the caller's thread, before run().
  asio::ip::tcp::endpoint listen(const asio::ip::tcp::endpoint& want);
  void run();  // the thread's body: accept and serve until stop()
  // On any thread: stop accepting, refuse new clients, and close idle keep-alive
  // connections; requests in progress finish.
  void drain();
  // On any thread: close every connection now (the drain time-out has passed). Each ends as
  // on any close, on its own thread, and writes its records.
  void close_sessions();
  void stop();  // on any thread: the loop returns
  // After the thread is joined: write the decision log's pending summaries.
  void flush_log() { log_.flush(); }
  // This thread as the DNS server sees it.
  runtime::Loop loop() { return {&io_, &producer_}; }
  // TLS inspection for CONNECTs that method/path rules name (inspection.hpp); without it
  // such a CONNECT is refused. Before run(); it outlives this worker.
  void set_inspection(Inspection* inspection) { inspection_ = inspection; }
  // Replace the ways out (component tests).
  void set_outside(LookupFn lookup, ConnectFn connect);
  // Serve a client accepted on this worker's loop (counted in `active` already): a new
  // Session, in memory from the worker's pool. On the loop's thread.
  void start_session(asio::ip::tcp::socket client, const asio::ip::tcp::endpoint& peer);

  // ---- What a Session uses.

  asio::io_context& io() { return io_; }
  const config::ProxyConfig& cfg() const { return cfg_; }
  std::shared_ptr<const policy::Snapshot> snapshot() const { return store_.current(); }
  decision_log::FoldingLog& log() { return log_; }
  bool draining() const { return draining_; }
  // Ask mode: whether a request that no rule allows is offered to pending() for holding.
  bool asking() const { return pending_ && pending_->asking(); }
  runtime::PendingTable& pending() { return *pending_; }
  Inspection* inspection() { return inspection_; }
  // A resolver cache hit, or false.
  bool cached(const std::string& host, ResolveResult& out) { return resolver_.cached(host, out); }
  asio::awaitable<ResolveResult> lookup(std::string host) { return lookup_(std::move(host)); }
  asio::awaitable<asio::error_code> connect(asio::ip::tcp::socket& s, asio::ip::tcp::endpoint to) {
    return connect_(s, std::move(to));
  }
  // A session counts from its creation to its destruction (and was counted in `active`
  // when accepted).
  void enter(Session& s);
  void leave(Session& s);
  // Buffers a request uses and gives back (spares.hpp): header indexes, rewritten heads.
  Spares<std::vector<http::Header>>& header_spares() { return header_spares_; }
  Spares<std::string>& text_spares() { return text_spares_; }
  Spares<ByteBuffer>& read_spares() { return read_spares_; }  // clients' read buffers

 private:
  bool take_client(asio::ip::tcp::socket sock, const asio::ip::tcp::endpoint& peer);
  template <class Act>
  void for_each_session(Act act);

  // Declared before io_: destroying io_ destroys pending sessions, which leave() here,
  // give their buffers back and return their memory to the pool.
  Session* sessions_ = nullptr;  // the open ones, linked through Session::links_
  BlockPool session_memory_{256};
  // Enough for the requests in flight on one thread to swap buffers without the allocator;
  // at most 64 x 8 KiB of text and 64 x 256 header slots (8 KiB) are kept.
  Spares<std::vector<http::Header>> header_spares_{64, 256};
  Spares<std::string> text_spares_{64, 8 * 1024};
  // A client's head is read into one of these (4 KiB at first); at most 64 x 16 KiB kept.
  Spares<ByteBuffer> read_spares_{64, 16 * 1024};
  bool draining_ = false;
  // One thread runs this loop and works its sockets and timers; other threads only post
  // to it (drain, stop, the DNS server's start). So the reactor takes no lock per socket
  // operation, where it took one or two for each wait and completion (12 lock and unlock
  // pairs a tunnel); posting and registration keep theirs.
  asio::io_context io_{ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  const config::ProxyConfig& cfg_;
  policy::SnapshotStore& store_;
  decision_log::DecisionLog::Producer& producer_;
  std::atomic<std::size_t>& active_;
  runtime::PendingTable* pending_;
  Inspection* inspection_ = nullptr;
  Resolver resolver_;
  decision_log::FoldingLog log_;  // deny records past decision-log-per-client are folded
  LookupFn lookup_;               // resolver_.async_resolve
  ConnectFn connect_;             // socket.async_connect
  std::vector<asio::ip::tcp::socket> listeners_;  // runtime::listen_tcp
  runtime::SpareDescriptor spare_;  // released to accept-and-refuse when out of descriptors
};

}  // namespace vibepit::proxy
