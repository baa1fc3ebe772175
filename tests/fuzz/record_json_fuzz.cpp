// libFuzzer target: the decision log's NDJSON writer. Record fields carry bytes from the
// network (host names, DNS names, error texts), and every line must still be one valid JSON
// object on one line: each string field reads back exactly when it was valid UTF-8, and
// with U+FFFD in place of what was not. The numbers read back as written.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "vibepit/decision_log/decision_log.hpp"

namespace {

using json = nlohmann::json;
using vibepit::decision_log::DecisionRecord;

// Whether nlohmann, whose decoder is not ours, takes `s` as UTF-8.
bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

void check_string(const json& line, const char* key, const std::string& written) {
  CHECK(line.contains(key) && line[key].is_string());
  const auto& read = line[key].get_ref<const std::string&>();
  if (valid_utf8(written)) {
    CHECK(read == written);
  } else {
    CHECK(read.find("\xef\xbf\xbd") != std::string::npos);
  }
}

std::uint64_t take64(std::string_view& in) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    v = v << 8 | static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.empty()) return 0;
  const unsigned flags = static_cast<unsigned char>(in.front());
  in.remove_prefix(1);
  DecisionRecord r;
  r.src = flags & 1 ? "dns" : "proxy";
  r.close = flags & 2;
  r.totals = flags & 4;
  r.verdict = flags & 8 ? vibepit::policy::Verdict::allow : vibepit::policy::Verdict::deny;
  r.id = take64(in);
  r.ts_us = static_cast<std::int64_t>(take64(in) % (4'000'000'000ull * 1'000'000));
  r.gen = take64(in);
  r.count = flags & 16 ? take64(in) : 0;
  r.port = static_cast<std::uint16_t>(take64(in));
  // The rest: NUL-separated string fields.
  std::vector<std::string> parts;
  for (std::size_t at = 0; at <= in.size();) {
    const std::size_t end = std::min(in.find('\0', at), in.size());
    parts.emplace_back(in.substr(at, end - at));
    at = end + 1;
  }
  parts.resize(7);
  r.client = parts[0];
  r.method = parts[1];
  r.host = parts[2];
  r.rule = parts[3];
  r.range = parts[4];
  r.addr = parts[5];
  r.detail = parts[6];
  if (flags & 1) r.transport = "udp";

  const std::string line = vibepit::decision_log::to_json_line(r);
  CHECK(!line.empty() && line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(line.find('\r') == std::string::npos);
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  CHECK(!j.is_discarded() && j.is_object());
  CHECK(j["id"] == r.id);
  CHECK(j["gen"] == r.gen);
  CHECK(j["src"] == std::string(r.src));
  CHECK(j.contains("count") == (r.count != 0));
  if (r.count) CHECK(j["count"] == r.count);
  check_string(j, "client", r.client);
  check_string(j, flags & 1 ? "qname" : "host", r.host);
  check_string(j, "rule", r.rule);
  if (!r.range.empty()) check_string(j, "range", r.range);
  if (!r.detail.empty()) check_string(j, "detail", std::string(r.detail.view()));
  if (!(flags & 1)) {
    check_string(j, "method", r.method);
    check_string(j, "addr", r.addr);
    CHECK(j["port"] == r.port);
  }
  return 0;
}
