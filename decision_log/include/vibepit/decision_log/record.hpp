#pragma once
// A decision record: one per decision, plus one when an allowed connection closes. An I/O
// thread fills it and hands it to its Producer; the writer thread formats it (format.hpp).
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/decision.hpp"
#include "vibepit/policy/ip.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::decision_log {

// A record's free text: a string literal, borrowed (so a denial's standard explanation
// costs its I/O thread no allocation), or text of its own. Assigning text owns it;
// set_literal() borrows.
class RecordText {
 public:
  RecordText() = default;
  RecordText(std::string s) : own_(std::move(s)) {}  // NOLINT: implicit, as std::string's
  RecordText(const char* s) : own_(s) {}             // NOLINT: copied, not borrowed
  // `s` must have static storage: a literal.
  void set_literal(const char* s) {
    own_.clear();
    lit_ = s;
  }
  std::string_view view() const { return lit_ ? std::string_view(lit_) : std::string_view(own_); }
  operator std::string_view() const { return view(); }  // NOLINT: reads as a string
  bool empty() const { return view().empty(); }
  friend bool operator==(const RecordText& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& os, const RecordText& t) { return os << t.view(); }

 private:
  std::string own_;
  const char* lit_ = nullptr;
};

struct DecisionRecord {
  std::uint64_t id = 0;
  std::int64_t ts_us = 0;  // wall clock, microseconds since the epoch
  const char* src = "proxy";
  bool close = false;   // false: the decision; true: the connection it allowed has closed
  bool totals = false;  // a decision record written at completion, carrying the totals too
  std::string client;
  std::string method;
  std::string host;
  std::uint16_t port = 0;
  // A request decided by method and path rules: its path as they matched it (normalised,
  // no query). Empty otherwise: no other request's path reaches the log.
  std::string path;
  // A request inside an inspected CONNECT: that CONNECT's id. 0 otherwise.
  std::uint64_t tunnel = 0;
  // The credentials whose headers the request carried upstream, by name (never a value),
  // comma-separated. Empty: none.
  std::string credential;
  // A shared gateway's tenant whose rules decided the request (never its token). Empty: none.
  std::string tenant;
  policy::Verdict verdict = policy::Verdict::deny;
  policy::Reason reason = policy::Reason::not_allowlisted;
  std::string rule;
  std::string range;         // the blocked range, for blocked_address
  std::string addr;          // the address dialled
  RecordText detail;         // a short human explanation
  std::uint16_t status = 0;  // HTTP status sent to the client
  std::uint64_t gen = 0;
  policy::Mode mode = policy::Mode::enforce;  // the snapshot's mode at decision time
  bool would_deny = false;                    // audit mode: allowed although no rule matched
  std::uint64_t bytes_up = 0;
  std::uint64_t bytes_down = 0;
  std::uint64_t ms = 0;
  std::uint32_t elapsed_us = 0;  // request arrival to decision; 0 when not measured
  // Ask mode (runtime/pending.hpp), static storage. "held": not a decision but the event of
  // the request being held (event "held"), with the id its outcome will carry. Otherwise how
  // the hold ended: "released" (a rule now allows it), "refused", "expired", "gone" (the
  // client left), "ask_off", "shutdown"; `held_ms` is how long it waited. nullptr: never held.
  const char* hold = nullptr;
  std::uint64_t held_ms = 0;
  // A summary (RecordFolder): this record stands for `count` decisions of its client and
  // reason in an interval of `interval_ms`, folded into one. 0: an ordinary record.
  std::uint64_t count = 0;
  std::uint32_t interval_ms = 0;
  // DNS decisions (src "dns"): host holds the QNAME; the answer's addresses are formatted
  // by the writer thread, not on the I/O thread.
  std::uint16_t qtype = 0;          // 0 when the query could not be parsed that far
  const char* rcode = nullptr;      // static storage: "NOERROR", "REFUSED", ...
  const char* transport = nullptr;  // "udp" or "tcp"
  bool cached = false;
  std::vector<policy::IpAddr> addrs;
  // The client as an address and port, which the writer formats when `client` is empty:
  // the I/O threads (the DNS server's per-query path, the proxy's sessions) leave `client`
  // empty, so a record costs them no text of its own.
  policy::IpAddr client_ip;
  std::uint16_t client_port = 0;
};

std::int64_t now_us();  // the wall clock of DecisionRecord::ts_us, microseconds

// The heap buffers of records that are done with (written, or folded away), kept for new
// records: the host, rule and dialled-address text and the answer's address list. A record
// filled from them costs its thread no allocation, and the thread that finished the old
// one frees nothing. Only buffers worth keeping are taken: on the heap (an inline string
// has nothing to give) and within the bounds, so a spare holds at most a few hundred bytes.
struct RecordBuffers {
  static constexpr std::size_t kTextMax = 256;  // a QNAME's 253 characters fit
  static constexpr std::size_t kAddrsMax = 16;

  std::string host, rule, addr;
  std::vector<policy::IpAddr> addrs;

  // Takes each of r's buffers worth keeping that is larger than the one held; the one held
  // goes to r instead. True when any was taken.
  bool take(DecisionRecord& r);
  // Gives the buffers held to r, a new record (what r held goes nowhere), each emptied with
  // its capacity kept; this holds none after.
  void give(DecisionRecord& r);
  bool empty() const;
};

}  // namespace vibepit::decision_log
