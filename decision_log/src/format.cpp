#include "vibepit/decision_log/format.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string_view>

#include "vibepit/policy/dns_types.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::decision_log {
namespace {

// A line being written at the end of a string. Each field first makes room for its longest
// form (one capacity check a field, not one a byte), then writes through a pointer; done()
// cuts the string to what was written. The writer thread formats every record, so this is
// most of its work per record (bench/micro/log_bench.cpp).
class Line {
 public:
  explicit Line(std::string& out) : out_(out) { p_ = end_ = out.data() + out.size(); }
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;

  // `name` is one of this file's literals, plain ASCII: nothing to escape.
  template <std::size_t N>
  void field(const char (&name)[N], std::string_view v) {
    room(N + 5 + 6 * v.size());
    key(name);
    string(v);
  }
  template <std::size_t N>
  void field(const char (&name)[N], std::uint64_t v) {
    room(N + 3 + 20);
    key(name);
    number(v);
  }
  // `,"name":` and the text as it is, which must be valid JSON already.
  template <std::size_t N>
  void raw_field(const char (&name)[N], std::string_view json) {
    room(N + 3 + json.size());
    key(name);
    copy(json);
  }
  void raw(std::string_view json) {
    room(json.size());
    copy(json);
  }
  void value(std::uint64_t v) {
    room(20);
    number(v);
  }
  // The timestamp: a JSON string, RFC 3339 UTC with microseconds.
  void timestamp(std::int64_t ts_us);
  // A JSON string of an address's text and a port, "192.0.2.1:40312" or "[2001:db8::1]:53".
  void host_port(const policy::IpAddr& ip, std::uint16_t port) {
    room(2 + 2 + policy::IpAddr::kMaxText + 1 + 5);
    *p_++ = '"';
    if (ip.v6) *p_++ = '[';
    p_ = ip.write(p_);
    if (ip.v6) *p_++ = ']';
    *p_++ = ':';
    number(port);
    *p_++ = '"';
  }
  // A JSON string of an address's text.
  void address(const policy::IpAddr& ip) {
    room(2 + policy::IpAddr::kMaxText);
    *p_++ = '"';
    p_ = ip.write(p_);
    *p_++ = '"';
  }
  void done() {
    assert(p_ <= end_);  // every write made its room first
    out_.resize(static_cast<std::size_t>(p_ - out_.data()));
  }

 private:
  void room(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) grow(n);
  }
  // Out of line: taken once a line at its start, and only again for a long field.
  [[gnu::noinline]] void grow(std::size_t n) {
    const auto at = static_cast<std::size_t>(p_ - out_.data());
    out_.resize(at + std::max<std::size_t>(n, kLine));
    p_ = out_.data() + at;
    end_ = out_.data() + out_.size();
  }
  template <std::size_t N>
  void key(const char (&name)[N]) {
    *p_++ = ',';
    *p_++ = '"';
    std::memcpy(p_, name, N - 1);
    p_ += N - 1;
    *p_++ = '"';
    *p_++ = ':';
  }
  void copy(std::string_view v) {
    std::memcpy(p_, v.data(), v.size());
    p_ += v.size();
  }
  void number(std::uint64_t v) { p_ = std::to_chars(p_, p_ + 20, v).ptr; }
  void string(std::string_view v);  // room: 2 + 6 × v.size()

  static constexpr std::size_t kLine = 512;  // room made at once: most lines fit
  std::string& out_;
  char* p_;
  char* end_;
};

void Line::timestamp(std::int64_t ts_us) {
  // Only the writer thread formats; the calendar part changes once a second.
  thread_local std::time_t cached_secs = -1;
  thread_local char cached[32];
  thread_local std::size_t cached_len = 0;
  std::time_t secs = ts_us / 1'000'000;
  if (secs != cached_secs) {
    std::tm tm{};
    gmtime_r(&secs, &tm);
    cached_len = std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_secs = secs;
  }
  room(cached_len + 11);
  *p_++ = '"';
  copy({cached, cached_len});
  auto frac = static_cast<unsigned>(ts_us % 1'000'000);
  char digits[9] = {'.', '0', '0', '0', '0', '0', '0', 'Z', '"'};
  for (int i = 6; i >= 1; --i, frac /= 10) digits[i] = static_cast<char>('0' + frac % 10);
  copy({digits, sizeof digits});
}

// The bytes JSON takes as they are in a string: printable ASCII but '"' and '\\'.
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int b = 0x20; b < 0x80; ++b) t[static_cast<std::size_t>(b)] = b != '"' && b != '\\';
  return t;
}();

// The length of the valid UTF-8 sequence at the start of [s, end), or 0 where there is none
// (no overlongs, no surrogates, at most U+10FFFF).
std::size_t utf8_sequence(const unsigned char* s, const unsigned char* end) {
  const unsigned c = s[0];
  const std::size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (len == 0 || c > 0xf4 || static_cast<std::size_t>(end - s) < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((s[k] & 0xc0) != 0x80) return 0;
  }
  if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return 0;
  if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0;
  return len;
}

// JSON string escaping. Bytes that are not valid UTF-8 (hosts come from the wire) become
// U+FFFD, so every line is valid JSON. A byte takes at most 6 (a control byte's \u00XX).
void Line::string(std::string_view v) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* s = reinterpret_cast<const unsigned char*>(v.data());
  const auto* const end = s + v.size();
  *p_++ = '"';
  while (s != end) {
    // Copy the run of plain printable ASCII at once; escape only what needs it.
    const auto* run = s;
    while (run != end && kPlain[*run]) ++run;
    std::memcpy(p_, s, static_cast<std::size_t>(run - s));
    p_ += run - s;
    s = run;
    if (s == end) break;
    const unsigned c = *s;
    if (c == '"' || c == '\\') {
      *p_++ = '\\';
      *p_++ = static_cast<char>(c);
      ++s;
    } else if (c < 0x20) {
      std::memcpy(p_, "\\u00", 4);
      p_[4] = kHex[c >> 4];
      p_[5] = kHex[c & 0xf];
      p_ += 6;
      ++s;
    } else if (const std::size_t len = utf8_sequence(s, end); len != 0) {
      std::memcpy(p_, s, len);
      p_ += len;
      s += len;
    } else {
      std::memcpy(p_, "\xef\xbf\xbd", 3);
      p_ += 3;
      ++s;
    }
  }
  *p_++ = '"';
}

void mode_fields(Line& line, const DecisionRecord& r) {
  line.field("mode", policy::to_string(r.mode));
  // would_deny marks an allow that no rule matched. A later stage may still deny the request
  // (every resolved address blocked, the name did not resolve): that record is a denial.
  if (r.would_deny && r.verdict == policy::Verdict::allow) line.raw(",\"would_deny\":true");
}

// A summary stands for `count` decisions of one client in one interval (RecordFolder).
void summary_fields(Line& line, const DecisionRecord& r) {
  if (r.count == 0) return;
  line.field("count", r.count);
  line.field("interval_ms", std::uint64_t{r.interval_ms});
}

// The client's "address:port": its text when the record carries one, else made here from
// client_ip and client_port.
void client_field(Line& line, const DecisionRecord& r) {
  if (!r.client.empty() || r.client_port == 0) return line.field("client", r.client);
  line.raw(",\"client\":");
  line.host_port(r.client_ip, r.client_port);
}

void dns_fields(Line& line, const DecisionRecord& r) {
  client_field(line, r);
  if (r.transport) line.field("transport", r.transport);
  line.field("qname", r.host);
  if (!r.tenant.empty()) line.field("tenant", r.tenant);
  line.field("qtype", r.qtype ? policy::dns_type_name(r.qtype) : std::string());
  line.field("rcode", r.rcode ? r.rcode : "");
  line.raw(",\"addrs\":[");
  for (std::size_t i = 0; i < r.addrs.size(); ++i) {
    if (i) line.raw(",");
    line.address(r.addrs[i]);
  }
  line.raw("]");
  line.raw_field("cached", r.cached ? "true" : "false");
  line.field("verdict", policy::to_string(r.verdict));
  line.field("reason", policy::to_string(r.reason));
  line.field("rule", r.rule);
  if (!r.range.empty()) line.field("range", r.range);
  if (!r.detail.empty()) line.field("detail", r.detail.view());
  line.field("gen", r.gen);
  mode_fields(line, r);
  summary_fields(line, r);
  if (r.elapsed_us) line.field("us", std::uint64_t{r.elapsed_us});
}

}  // namespace

std::string to_json_line(const DecisionRecord& r) {
  std::string out;
  out.reserve(320);
  append_json_line(out, r);
  return out;
}

void append_json_line(std::string& out, const DecisionRecord& r) {
  Line line(out);
  line.raw("{\"id\":");
  line.value(r.id);
  line.raw(",\"ts\":");
  line.timestamp(r.ts_us);
  line.field("src", r.src);
  if (std::string_view(r.src) == "dns") {
    line.field("event", "decision");
    dns_fields(line, r);
    line.raw("}\n");
    return line.done();
  }
  const bool held = r.hold && std::string_view(r.hold) == "held";
  line.raw_field("event", r.close ? "\"close\"" : held ? "\"held\"" : "\"decision\"");
  client_field(line, r);
  line.field("method", r.method);
  line.field("host", r.host);
  line.field("port", std::uint64_t{r.port});
  if (!r.path.empty()) line.field("path", r.path);
  if (r.tunnel != 0) line.field("tunnel", r.tunnel);
  if (!r.credential.empty()) line.field("credential", r.credential);
  if (!r.tenant.empty()) line.field("tenant", r.tenant);
  line.field("verdict", policy::to_string(r.verdict));
  line.field("reason", policy::to_string(r.reason));
  line.field("rule", r.rule);
  if (!r.range.empty()) line.field("range", r.range);
  line.field("addr", r.addr);
  if (!r.detail.empty()) line.field("detail", r.detail.view());
  if (r.status != 0) line.field("status", std::uint64_t{r.status});
  line.field("gen", r.gen);
  mode_fields(line, r);
  summary_fields(line, r);
  if (r.elapsed_us && !r.close) line.field("us", std::uint64_t{r.elapsed_us});
  if (r.hold && !held) {
    line.field("hold", r.hold);
    line.field("held_ms", r.held_ms);
  }
  if (r.close || r.totals) {
    line.field("bytes_up", r.bytes_up);
    line.field("bytes_down", r.bytes_down);
    line.field("ms", r.ms);
  }
  line.raw("}\n");
  line.done();
}

}  // namespace vibepit::decision_log
