#pragma once
// The control API without sockets: framing one HTTP/1.1 request out of the bytes a client
// sent, and answering it. Both are pure functions of their inputs (and of the rule store,
// the decision feed and the counters they are given), so they are fuzzed and unit-tested
// without TLS. The server (server.hpp) only moves bytes.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vibepit/control/rule_updater.hpp"
#include "vibepit/policy/snapshot.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::control {

struct ApiLimits {
  std::size_t max_head = 8 * 1024;
  std::size_t max_body = 1024 * 1024;
  std::size_t max_entries = 1000;  // rule entries in one POST
  std::size_t max_page = 1000;     // decisions in one GET
};

struct ApiRequest {
  std::string method;
  std::string path;                                        // without the query string
  std::vector<std::pair<std::string, std::string>> query;  // percent-decoded
  // Wiped when freed: PUT /v1/secrets/NAME carries a credential's value.
  secret::WipedString body;
  bool keep_alive = true;
};

enum class FrameState { incomplete, complete, error };

struct Framed {
  FrameState state = FrameState::incomplete;
  std::size_t consumed = 0;  // bytes of `buf` that made the request (when complete)
  int status = 0;            // when error: the status to answer with before closing
  std::string error;         // when error: why
};

// Take one request from the front of `buf`. Bodies need Content-Length (no
// Transfer-Encoding); a head or body over the limits is an error (431, 413).
Framed frame_request(std::string_view buf, const ApiLimits& limits, ApiRequest& out);

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra, e.g. Allow
  bool follow = false;             // stream decisions after the head (chunked NDJSON)
  std::uint64_t follow_after = 0;  // ... starting after this sequence number
};

// The response head (and, unless streaming, the body) as bytes on the wire.
std::string serialize(const ApiResponse& r, bool keep_alive);
// `{"error": message}` with the JSON escaping done right.
std::string error_json(std::string_view message);
ApiResponse error_response(int status, std::string_view message);

// Where decision records come from: the decision log's bounded ring.
class DecisionFeed {
 public:
  struct Entry {
    std::uint64_t seq;
    std::string line;  // one NDJSON object, with its newline
  };
  virtual ~DecisionFeed() = default;
  // Entries with seq > after, at most limit; `lost` counts evicted entries after `after`.
  virtual std::vector<Entry> since(std::uint64_t after, std::size_t limit,
                                   std::uint64_t& lost) const = 0;
  virtual std::uint64_t last_seq() const = 0;  // the newest entry's seq, 0 when none
  // The feed's last word: once no record can come any more, one JSON object line with the
  // final counters ({"end":true,"last":N,"dropped":N,"unwritten":N}); before that, "".
  // A follower that has every entry up to `last` sends it and ends its stream, so the
  // reader knows it saw all there was (vibepit ci's report).
  virtual std::string end_line() const { return {}; }
};

// Counters for /v1/stats (JSON text) and /metrics (Prometheus text format).
class StatsSource {
 public:
  virtual ~StatsSource() = default;
  virtual std::string stats_json() const = 0;
  virtual std::string prometheus() const = 0;
};

// Ask mode as the API sees it: the proxy's table of held requests (runtime/pending.hpp).
struct AskSettings {
  bool enabled = false;
  std::uint64_t timeout_ms = 0;
  std::uint64_t max_per_client = 0;
  std::uint64_t max_total = 0;
};

struct PendingView {
  std::uint64_t id = 0;  // the held request's decision record id
  std::string method;
  std::string host;
  std::uint16_t port = 0;
  std::string client;  // "address:port"
  std::int64_t since_us = 0;
  std::uint64_t waited_ms = 0;
  std::uint64_t expires_in_ms = 0;
};

class PendingSource {
 public:
  virtual ~PendingSource() = default;
  virtual AskSettings ask() const = 0;
  // Change what is given; returns the settings in force after. Turning ask mode off
  // answers every held request.
  virtual AskSettings set_ask(std::optional<bool> enabled,
                              std::optional<std::uint64_t> timeout_ms) = 0;
  virtual std::vector<PendingView> pending() const = 0;  // oldest first
  virtual bool refuse(std::uint64_t id) = 0;             // false: no such request is held
};

// A feed entry as a line of the API's output: the record with its sequence number first.
std::string feed_line(const DecisionFeed::Entry& e);

class ControlApi {
 public:
  // `pending`: ask mode's held requests; without it /v1/pending and /v1/ask answer 404.
  ControlApi(RuleUpdater& rules, const policy::SnapshotStore& store, const DecisionFeed& feed,
             const StatsSource& stats, ApiLimits limits = {}, PendingSource* pending = nullptr)
      : rules_(rules),
        store_(store),
        feed_(feed),
        stats_(stats),
        limits_(limits),
        pending_(pending) {}

  ApiResponse handle(const ApiRequest& req) const;
  const ApiLimits& limits() const { return limits_; }
  // The inspection CA's certificate (PEM), served at GET /v1/inspect-ca; none: 404.
  void set_inspect_ca(std::string pem) { inspect_ca_ = std::move(pem); }

 private:
  ApiResponse rules_view() const;
  ApiResponse add_rules(RuleList list, const ApiRequest& req) const;
  ApiResponse set_mode(const ApiRequest& req) const;
  ApiResponse decisions(const ApiRequest& req) const;
  ApiResponse pending_view() const;
  ApiResponse refuse_pending(const ApiRequest& req) const;
  ApiResponse set_ask(const ApiRequest& req) const;
  // /v1/secrets (api_secrets.cpp).
  ApiResponse secrets(const ApiRequest& req) const;
  ApiResponse put_secret(std::string_view name, const ApiRequest& req) const;

  RuleUpdater& rules_;
  const policy::SnapshotStore& store_;
  const DecisionFeed& feed_;
  const StatsSource& stats_;
  ApiLimits limits_;
  PendingSource* pending_;
  std::string inspect_ca_;
};

}  // namespace vibepit::control
