#pragma once
// The report of a `vibepit ci` run: the session's decision records (NDJSON, written by
// vibepit-proxy) folded into one entry per destination, rendered as versioned JSON (schema:
// docs/ci-report.schema.json), Markdown for a CI summary, or JUnit XML. Pure: no I/O.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace vibepit::launcher {

inline constexpr int kCiReportVersion = 1;
// Destinations one report lists at most; records for more make it incomplete. A job that
// reaches for this many names is flooding, and the launcher's memory stays bounded.
inline constexpr std::size_t kMaxDestinations = 100'000;

enum class CiMode { enforce, audit, learn };
std::string_view to_string(CiMode m);
std::optional<CiMode> parse_ci_mode(std::string_view text);

// One destination: what the job reached for, over one protocol.
struct Destination {
  std::string protocol;  // "connect", "http" or "dns"
  std::string host;      // name or IP text as the client asked for it (DNS: the QNAME)
  std::uint16_t port = 0;
  std::uint64_t count = 0;  // decisions
  std::uint64_t allowed = 0, denied = 0, would_deny = 0;
  std::string first, last;  // RFC 3339 times of the first and last decision
  std::uint64_t bytes_up = 0, bytes_down = 0;
  // The destination's verdict is the worst one seen: deny, then would_deny, then allow.
  // reason and rule come from a decision with that verdict.
  std::string verdict;
  std::string reason;
  std::string rule;
  std::vector<std::string> qtypes;  // DNS only, in the order first seen
};

// How the job's command ended.
struct CommandOutcome {
  std::optional<int> status;  // the command's exit status, when it ran to an end
  std::string interrupted;    // the signal that interrupted vibepit ci ("SIGTERM"), or ""
  std::string error;          // why the command did not run or finish, or ""
};

struct CiReport {
  CiMode mode = CiMode::enforce;
  std::string project;
  std::vector<std::string> command;
  std::string started, finished;  // RFC 3339
  std::uint64_t generation = 0;   // the highest rule generation any decision was made with
  CommandOutcome outcome;
  std::vector<Destination> destinations;      // sorted: denied first, then by protocol, host, port
  std::uint64_t skipped_lines = 0;            // lines of the log that were not decision records
  std::uint64_t destinations_over_limit = 0;  // records past kMaxDestinations, not listed
  // Where the records came from, and why the report may not hold all of them: empty
  // `incomplete` means every record the proxy made is in it.
  std::uint64_t records_received = 0, records_missing = 0, records_dropped = 0;
  std::uint64_t records_unwritten = 0;  // the proxy's log file could not take them (not lost)
  std::vector<std::string> incomplete;
  bool fail_on_deny = false;
  int exit_status = 0;                                   // what vibepit ci exits with
  std::string exit_reason;                               // one line: why that status
  std::vector<std::string> proposal_http, proposal_dns;  // learn mode

  std::uint64_t count_where(std::string_view verdict) const;  // destinations with that verdict
};

// Folds decision records (NDJSON) into the report's destinations. Lines that are not JSON
// objects with the fields of a decision or close record are counted in skipped_lines and
// otherwise ignored; everything else of the report is left as it is. A long log is fed in
// pieces, each ending at a line end, so it never has to fit in memory; finish() sorts the
// destinations once, and nothing may be fed after it.
class DecisionLogReader {
 public:
  explicit DecisionLogReader(CiReport& report);
  void feed(std::string_view ndjson);
  void finish();

 private:
  bool add(std::string_view line);  // false: not a record this report understands
  // The destination's entry, made when new; nullptr past kMaxDestinations.
  Destination* at(const std::string& protocol, const std::string& host, std::uint16_t port);

  CiReport& r_;
  std::map<std::tuple<std::string, std::string, std::uint16_t>, std::size_t> index_;
};

// One whole log (possibly cut short at the end): a DecisionLogReader fed once.
void add_decision_log(CiReport& report, std::string_view ndjson);

// Orders destinations: denied first, then would_deny, then allowed; within each by
// protocol, host and port.
void sort_destinations(CiReport& report);

std::string to_json(const CiReport& r);      // the versioned JSON document, with a newline
std::string to_markdown(const CiReport& r);  // a summary and one table row per destination
std::string to_junit(const CiReport& r);     // one test case per destination; denials fail

}  // namespace vibepit::launcher
