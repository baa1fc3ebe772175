#include "vibepit/launcher/ci/ci_stream.hpp"

#include <charconv>
#include <optional>

#include <nlohmann/json.hpp>

namespace vibepit::launcher {
namespace {

// The number after `"key":` when `text` begins with `{"key":`, else nothing. The control
// API puts a record's seq first, so a record's line is not parsed twice to find it.
std::optional<std::uint64_t> leading_number(std::string_view text, std::string_view key) {
  const std::string head = "{\"" + std::string(key) + "\":";
  if (text.substr(0, head.size()) != head) return std::nullopt;
  text.remove_prefix(head.size());
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  return n;
}

std::uint64_t number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

std::string records(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " decision record" : " decision records");
}

}  // namespace

StreamTally::StreamTally(CiReport& report) : reader_(report), report_(report) {}

void StreamTally::line(std::string_view text) {
  if (ended_) {
    ++after_end_;
    return;
  }
  if (auto seq = leading_number(text, "seq")) {
    if (*seq < next_seq_) {  // a record seen already, or numbered out of order
      ++report_.skipped_lines;
      return;
    }
    missing_ += *seq - next_seq_;
    next_seq_ = *seq + 1;
    ++received_;
    reader_.feed(text);
    return;
  }
  if (leading_number(text, "lost")) return;  // the gap shows in the sequence numbers
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.value("end", false) == true) {
    ended_ = true;
    const std::uint64_t last = number(j, "last");
    if (last >= next_seq_) missing_ += last - next_seq_ + 1;
    dropped_ = number(j, "dropped");
    unwritten_ = number(j, "unwritten");
    return;
  }
  ++report_.skipped_lines;
}

void StreamTally::finish() {
  reader_.finish();
}

std::vector<std::string> StreamTally::problems(const std::string& stream_error) const {
  std::vector<std::string> out;
  if (!ended_)
    out.push_back("the proxy's decision stream stopped before its final counters" +
                  (stream_error.empty() ? std::string(" (the proxy did not stop cleanly)")
                                        : ": " + stream_error));
  if (missing_ != 0)
    out.push_back(records(missing_) + " never reached the report (the proxy's ring evicted them " +
                  "before they were read)");
  if (dropped_ != 0)
    out.push_back(records(dropped_) + " were dropped by the proxy (its queues were full)");
  if (report_.skipped_lines != 0 || after_end_ != 0)
    out.push_back(std::to_string(report_.skipped_lines + after_end_) +
                  " lines of the decision stream were not records this report understands");
  if (report_.destinations_over_limit != 0)
    out.push_back(records(report_.destinations_over_limit) + " for more than " +
                  std::to_string(kMaxDestinations) + " destinations were counted but not listed");
  return out;
}

}  // namespace vibepit::launcher
