#pragma once
// vibepit monitor's model: one row per destination seen on the decision stream, the
// requests the proxy holds for a decision (ask mode), the selection and the filter. No
// terminal and no I/O: the command feeds it records and the pending list, asks it what to
// act on, and draws what screen.hpp lays out from it.
//
// Everything here that came from the sandbox (host names, DNS names, reasons) is kept as
// it came; the screen escapes it (terminal_text.hpp) as it lays it out.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace vibepit::launcher::monitor {

enum class Proto { http, connect, dns };
std::string_view to_string(Proto p);  // "http", "connect", "dns"

// A destination: what `a` allows.
struct Key {
  Proto proto = Proto::http;
  std::string host;                                           // a DNS row: the query name
  std::uint16_t port = 0;                                     // 0 on a DNS row
  friend auto operator<=>(const Key&, const Key&) = default;  // NOLINT(modernize-use-nullptr)
};

struct Row {
  Key key;
  std::uint64_t count = 0;   // decisions (a summary record counts for what it stands for)
  std::int64_t last_us = 0;  // the newest decision's time, microseconds since the epoch
  std::string verdict;       // the newest decision's: "allow" or "deny"
  std::string reason;
  std::string rule;
  // Held requests of this destination (ask mode): their ids, and since when the oldest
  // has waited.
  std::set<std::uint64_t> held;
  std::int64_t held_since_us = 0;
  bool pending() const { return !held.empty(); }
};

// A held request as GET /v1/pending lists it.
struct Pending {
  std::uint64_t id = 0;
  Proto proto = Proto::connect;
  std::string host;
  std::uint16_t port = 0;
  std::int64_t since_us = 0;
};

// What the status line shows.
struct Status {
  std::string session;
  std::string mode;  // "enforce", "audit"
  std::uint64_t generation = 0;
  bool ask = false;
  std::uint64_t ask_timeout_ms = 0;
  bool connected = true;  // false while the stream is down
};

class Model {
 public:
  // A line of GET /v1/decisions?follow=1 (a record, or the stream's other lines, which are
  // ignored). Returns false when the line is the feed's last word ({"end": true}): the
  // session has ended.
  bool on_line(std::string_view line);
  // The proxy's list of held requests as it was at `as_of_us` (when it was asked for),
  // which replaces what the stream said was held, except for what the stream told since:
  // a request held after `as_of_us`, or one whose outcome the stream has brought.
  void set_pending(const std::vector<Pending>& pending, std::int64_t as_of_us = 0);

  Status& status() { return status_; }
  const Status& status() const { return status_; }

  // ---- The view.

  // The rows shown, in order: held rows first (the newest held first), then the rest by
  // last seen, newest first. Allowed rows only while they are shown (`f`); only rows whose
  // host contains the filter.
  std::vector<const Row*> visible() const;
  // The selected row, if any is shown: the newest held row until the user moves, then the
  // row the user chose (as long as it is shown).
  const Row* selected() const;
  std::size_t selected_index() const;  // in visible(); 0 when none

  void move(int delta);  // arrows, j/k: the selection stays where the user put it
  void toggle_allowed() { show_allowed_ = !show_allowed_; }
  bool showing_allowed() const { return show_allowed_; }
  void set_filter(std::string f) { filter_ = std::move(f); }
  const std::string& filter() const { return filter_; }

  // Counts for the status line.
  std::size_t held_count() const;
  std::uint64_t allowed() const { return allowed_; }
  std::uint64_t denied() const { return denied_; }
  std::size_t rows() const { return rows_.size(); }

  // At most this many destinations are kept: past it, the row seen longest ago goes (a
  // held row never does). A flood of names cannot grow the monitor without bound.
  static constexpr std::size_t kMaxRows = 10'000;

 private:
  Row& row(const Key& k);
  void forget_oldest();
  void unhold(std::uint64_t id);

  struct Held {
    Key key;
    std::int64_t since_us = 0;
  };
  void mark_held(std::uint64_t id, const Held& h);

  std::map<Key, Row> rows_;
  std::map<std::uint64_t, Held> held_by_id_;
  std::set<std::uint64_t> ended_;  // ids whose outcome came, the newest kMaxEnded
  static constexpr std::size_t kMaxEnded = 4096;
  Status status_;
  std::optional<Key> chosen_;  // set once the user moves the selection
  bool show_allowed_ = false;  // the monitor is for what is denied and held
  std::string filter_;
  std::uint64_t allowed_ = 0, denied_ = 0;
};

}  // namespace vibepit::launcher::monitor
