#pragma once
// Forwarding UDP clients' queries to the upstream servers over UDP, on one I/O thread's loop.
//
// A cache miss from a UDP client goes out on a connected UDP socket per upstream server,
// with an ID of our own, and the answer comes back through an ID map: many queries leave
// in one sendmmsg() and many answers arrive in one recvmmsg(), as the clients' own do
// (dns_worker.hpp). c-ares, which did this before, sends and reads one datagram per system
// call and parses each answer's question again; it is still the forwarder for TCP clients
// (and the proxy's own lookups), whose answers may need TCP upstream.
//
// What an answer must have to be taken for a query (RFC 5452): it came from the server's
// address and port (the socket is connected, so the kernel drops anything else), it
// carries the query's ID (16 random bits from the kernel's CSPRNG, drawn per query and per
// retry), QR is set, QDCOUNT is 1, and its question is the one we sent (name compared
// without case, type, class). Anything else is dropped and the query keeps waiting, so a
// forged datagram cannot turn an answer into a SERVFAIL. The source port is the one the
// kernel picked at random when the socket was connected; it stays for the socket's life.
//
// Timeouts: the budget is that of c-ares before: a first try of a third of it, then a retry
// on the next server (the same one when there is one) for the other two thirds. An ICMP
// error (ECONNREFUSED: nothing listens there) ends the try of every query on that socket
// at once. When the budget runs out the query completes with `timeout`.
//
// IDs: each socket has 65 536. A socket with kSocketLoad queries in flight takes no more;
// the next query goes to the server's next socket. Below that load a random draw is free
// at least three times in four, and a free ID is always found.
// The server opens as many sockets per upstream as dns-max-pending needs (one by default).
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/udp.hpp>
#include <asio/steady_timer.hpp>

#include "ring_queue.hpp"
#include "vibepit/config/config.hpp"

namespace vibepit::dns {

enum class UpstreamStatus {
  answer,   // the bytes are the upstream's answer, with the ID we sent
  timeout,  // every try ran out of time
  refused,  // the last try's server refused (ICMP port unreachable)
  stopped,  // the forwarder is being destroyed: touch nothing of the caller's
};
const char* to_string(UpstreamStatus s);

class UdpUpstream {
 public:
  // Called exactly once per query sent. `answer` is valid during the call only.
  using Done = void (*)(void* user, UpstreamStatus status, std::span<const std::uint8_t> answer);

  struct Options {
    std::chrono::milliseconds timeout{2000};  // the whole budget, the retry included
    std::size_t max_pending = 1024;           // sizes the socket pool
  };

  // Throws std::system_error when a socket cannot be made.
  UdpUpstream(asio::io_context& io, const std::vector<config::Endpoint>& servers, Options opts,
              Done done);
  // Queries still pending complete with `stopped`.
  ~UdpUpstream();
  UdpUpstream(const UdpUpstream&) = delete;
  UdpUpstream& operator=(const UdpUpstream&) = delete;

  // Queue `query` (a whole DNS message whose question ends at `question_end`; its ID is
  // replaced) for the first server. It leaves with the others queued before the next
  // flush(), which runs by itself once the current handler returns. Returns false, and
  // sends nothing, when no ID is free.
  bool send(std::span<const std::uint8_t> query, std::size_t question_end, void* user);
  // Send what is queued now (one sendmmsg() per socket). Ends a hold().
  void flush();
  // Until the next flush(), send() queues without posting a flush of its own: the caller
  // flushes before its handler returns. The worker holds across each batch of client
  // datagrams. A posted flush that finds the batch's queries gone is no work, but a handler
  // waiting in the queue makes Asio's loop look at epoll again before it sleeps: one
  // epoll_wait() more per batch.
  void hold() { held_ = true; }
  // Called around each batch of answers (one recvmmsg()), in which many queries may
  // complete: a user can gather the replies they produce and send them in one go.
  void set_batch_hooks(std::function<void()> before, std::function<void()> after);

  std::size_t pending() const { return pending_.size(); }

  static constexpr std::size_t kSocketLoad = 16'384;  // a quarter of a socket's IDs

 private:
  struct Socket;
  struct Batch;
  struct Pending {
    void* user = nullptr;
    std::vector<std::uint8_t> query;  // as sent, our ID in it
    std::size_t question_end = 0;
    std::uint32_t serial = 0;  // tells a deadline entry whose query has since moved on
    std::uint8_t tries = 0;    // sent this many times
    std::size_t server = 0;    // of the current try
  };
  struct Deadline {
    std::chrono::steady_clock::time_point at;
    std::uint32_t key;
    std::uint32_t serial;
  };

  // key = socket index << 16 | ID
  static std::uint32_t key_of(std::size_t socket, std::uint16_t id) {
    return static_cast<std::uint32_t>(socket << 16 | id);
  }
  using Node = std::unordered_map<std::uint32_t, Pending>::node_type;

  // A free ID on `socket`: drawn at random (see free_id in the source).
  std::optional<std::uint16_t> free_id(std::size_t socket);
  // Gives the node's query a free ID on one of `server`'s sockets and queues it (the node
  // goes into pending_, leaving `node` empty); false, leaving it as it was, when none is free.
  bool place(Node& node, std::size_t server);
  // A node for a new query: one an ended query left (its buffer's capacity kept), or new.
  Node take_node();
  void give_back(Node node);
  // The query's try has ended (`why`): try the next server, or complete it with `why`.
  void try_again_or_fail(std::uint32_t key, UpstreamStatus why);
  void refuse(std::size_t socket);  // ECONNREFUSED on it: every query it holds has failed
  void complete(std::uint32_t key, std::span<const std::uint8_t> answer);
  void receive(std::size_t socket, bool drained);
  void drain(std::size_t socket);
  void take_answer(std::size_t socket, std::span<const std::uint8_t> msg);
  void arm_timer();
  // Drops the entries at the queues' fronts whose query was answered or moved on.
  void trim_deadlines();
  void on_timer();
  std::uint16_t random_id();

  asio::io_context& io_;
  std::size_t servers_;
  std::size_t per_server_;  // sockets per server; socket s serves server s / per_server_
  std::chrono::milliseconds first_try_, second_try_;
  Done done_;
  std::vector<std::unique_ptr<Socket>> sockets_;
  std::unique_ptr<Batch> batch_;
  std::unordered_map<std::uint32_t, Pending> pending_;
  std::vector<std::uint32_t> queued_;   // keys to send at the next flush
  std::vector<std::uint32_t> sending_;  // the keys flush() works through (capacity kept)
  // Nodes of ended queries, for the next ones: a query costs no allocation of its own.
  static constexpr std::size_t kSpareNodes = 128;
  std::vector<Node> spare_nodes_;
  bool flush_posted_ = false;
  bool held_ = false;  // hold(): the caller flushes
  // One queue per try: every entry of a queue has the same timeout, so each is in deadline order.
  RingQueue<Deadline> deadlines_[2];
  asio::steady_timer timer_;
  std::chrono::steady_clock::time_point timer_at_{};  // when the armed timer fires; {} if none
  std::uint32_t next_serial_ = 0;
  std::array<std::uint16_t, 256> ids_{};
  std::size_t ids_left_ = 0;
  std::function<void()> before_, after_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace vibepit::dns
