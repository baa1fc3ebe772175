#pragma once
// Ask mode's table of held requests. A request that no rule allows waits here, instead of
// being refused, until an allow covers it, the user refuses it, it expires, or its client
// goes away. The table is shared by the proxy's I/O threads (each holds its own sessions'
// requests) and the control API (which lists them, refuses one, and changes the settings).
//
// It decides nothing and keeps no time: a holder re-decides against the current snapshot
// when woken, and keeps its own deadline. What the table does is bound the holding (per
// client and in total), publish what is held, and wake holders. A wake is a function the
// holder gives, called on any thread (never under the table's lock), which must only post to
// the holder's own thread; it is never called once leave() has returned.
//
// Only a denied request in ask mode ever touches the table: an allowed one, and any
// request when asking is off, read one atomic flag at most.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "vibepit/config/config.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::runtime {

// How a hold was ended from outside. A holder sees the other endings for itself: an allow
// (by re-deciding), its deadline, its client going away.
enum class HoldEnd : std::uint8_t {
  none,      // still held
  refused,   // the user refused it (vibepit monitor's `d`, POST /v1/pending/refuse)
  ask_off,   // ask mode was turned off
  shutdown,  // the proxy is stopping
};

// A held request as the table publishes it.
struct PendingRequest {
  std::uint64_t id = 0;  // its decision record's id: the held event and the outcome carry it
  std::string method;    // "CONNECT", "GET", ...
  std::string host;
  std::uint16_t port = 0;
  policy::IpAddr client_ip;
  std::uint16_t client_port = 0;
  std::int64_t since_us = 0;                       // wall clock, when it was held
  std::chrono::milliseconds timeout{};             // set by hold(): ask-timeout-ms then
  std::chrono::steady_clock::time_point deadline;  // ... and when it expires
};

class PendingTable {
 public:
  using Wake = std::function<void()>;

  // One held request. Shared by the table (while held) and its holder.
  class Entry {
   public:
    const PendingRequest& request() const { return req_; }
    // How it was ended from outside; none while it is held or was left by its holder.
    HoldEnd ended() const { return end_.load(std::memory_order_acquire); }

   private:
    friend class PendingTable;
    void wake();  // calls wake_, unless its holder has left
    PendingRequest req_;
    // Held while wake_ is called or dropped: once leave() returns, no wake is running or
    // will run, so the holder may go (and its event loop with it).
    std::mutex wake_mu_;
    Wake wake_;
    std::atomic<HoldEnd> end_{HoldEnd::none};
    bool in_table_ = true;  // guarded by the table's lock
  };

  enum class Admit {
    held,         // in the table: wait for a wake
    off,          // ask mode is off (or the table is closed): refuse as usual
    client_full,  // this client has ask-max-per-client requests held already
    table_full,   // ask-max requests are held already
  };

  explicit PendingTable(config::AskConfig settings = {});
  PendingTable(const PendingTable&) = delete;
  PendingTable& operator=(const PendingTable&) = delete;

  // ---- The holders' side (I/O threads).

  // Whether a denied request should be offered to hold() at all. One relaxed load.
  bool asking() const { return asking_.load(std::memory_order_relaxed); }
  // Hold `req` (its deadline set from the current timeout). Returns the entry when held
  // (admit == held), else nullptr with the reason in `admit`.
  std::shared_ptr<Entry> hold(PendingRequest req, Wake wake, Admit& admit);
  // The holder is done with `e`, whatever the outcome: it leaves the list and the counts,
  // and its wake is not called any more. Idempotent.
  void leave(Entry& e);

  // ---- The deciders' side (control API, shutdown).

  // The rules changed: wake every holder to decide again.
  void rules_changed();
  // End one held request as refused. False when no such request is held.
  bool refuse(std::uint64_t id);
  // End every held request as `why`, and with shutdown hold nothing more.
  std::size_t end_all(HoldEnd why);

  config::AskConfig settings() const;
  // New settings. Turning ask mode off ends every held request (ask_off); a new timeout
  // applies to requests held from now on.
  void set_settings(const config::AskConfig& s);

  std::vector<PendingRequest> list() const;  // oldest first
  std::size_t size() const;

 private:
  // Under mu_: mark each held entry `why` and take it out of the table. Returns them, to be
  // woken once the lock is released.
  std::vector<std::shared_ptr<Entry>> end_locked(HoldEnd why);
  static void wake_each(const std::vector<std::shared_ptr<Entry>>& entries);
  void remove_locked(Entry& e);

  mutable std::mutex mu_;
  config::AskConfig settings_;
  std::atomic<bool> asking_;
  bool closed_ = false;
  std::map<std::uint64_t, std::shared_ptr<Entry>> held_;  // by id: ids rise with time
  std::unordered_map<policy::IpAddr, std::size_t, policy::IpAddrHash> per_client_;
};

}  // namespace vibepit::runtime
