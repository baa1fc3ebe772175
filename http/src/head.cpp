// Strict HTTP/1.x head parsing (RFC 9112 sections 2-5). One pass over the buffer, a byte
// class table, memchr for line ends; the only allocation is the headers vector.
#include "vibepit/http/head.hpp"

#include <array>
#include <cstring>

namespace vibepit::http {
namespace {

constexpr std::size_t kMaxHeaders = 100;
// RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request line.
constexpr int kMaxLeadingEmptyLines = 4;
constexpr std::size_t kInitialHeaderCapacity = 32;

enum : std::uint8_t { kTchar = 1, kFieldByte = 2, kTargetByte = 4 };

constexpr std::array<std::uint8_t, 256> make_classes() {
  std::array<std::uint8_t, 256> t{};
  constexpr std::string_view kTcharPunct = "!#$%&'*+-.^_`|~";
  for (int c = 0; c < 256; ++c) {
    std::uint8_t f = 0;
    const bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alnum || kTcharPunct.find(static_cast<char>(c)) != std::string_view::npos) f |= kTchar;
    if (c == '\t' || (c >= 0x20 && c != 0x7f)) f |= kFieldByte;
    if (c > 0x20 && c < 0x7f) f |= kTargetByte;
    t[static_cast<std::size_t>(c)] = f;
  }
  return t;
}
constexpr std::array<std::uint8_t, 256> kClasses = make_classes();

bool has(char c, std::uint8_t cls) {
  return (kClasses[static_cast<unsigned char>(c)] & cls) != 0;
}

bool all_of(std::string_view s, std::uint8_t cls) {
  for (char c : s) {
    if (!has(c, cls)) return false;
  }
  return true;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// The next line from `pos`, without its CRLF or bare LF. False when no LF follows yet.
bool next_line(std::string_view win, std::size_t pos, std::string_view& line, std::size_t& next) {
  if (pos >= win.size()) return false;  // also: an empty view's data() may be null
  const void* p = std::memchr(win.data() + pos, '\n', win.size() - pos);
  if (p == nullptr) return false;
  const std::size_t lf = static_cast<std::size_t>(static_cast<const char*>(p) - win.data());
  std::size_t end = lf;
  if (end > pos && win[end - 1] == '\r') --end;
  line = win.substr(pos, end - pos);
  next = lf + 1;
  return true;
}

ParseResult error(HeadError e) {
  return {ParseState::error, e};
}

// Not enough bytes for a full head: read more, unless the limit is already reached.
ParseResult need_more(std::string_view buf, std::size_t max_head) {
  if (buf.size() >= max_head) return error(HeadError::too_large);
  return {ParseState::incomplete, HeadError::none};
}

// "HTTP/1.0" or "HTTP/1.1". Other versions are bad_version; anything that is not a
// version at all is `otherwise`.
HeadError parse_version(std::string_view v, int& minor, HeadError otherwise) {
  if (v.size() == 8 && v.substr(0, 7) == "HTTP/1." && (v[7] == '0' || v[7] == '1')) {
    minor = v[7] - '0';
    return HeadError::none;
  }
  if (v.size() <= 5 || v.substr(0, 5) != "HTTP/") return otherwise;
  for (char c : v.substr(5)) {
    if (!(c == '.' || (c >= '0' && c <= '9'))) return otherwise;
  }
  return HeadError::bad_version;
}

HeadError parse_request_line(std::string_view line, RequestHead& out) {
  const std::size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos) return HeadError::bad_request_line;
  const std::size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return HeadError::bad_request_line;
  out.method = line.substr(0, sp1);
  out.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (out.method.empty() || !all_of(out.method, kTchar)) return HeadError::bad_request_line;
  if (out.target.empty() || !all_of(out.target, kTargetByte)) return HeadError::bad_request_line;
  return parse_version(line.substr(sp2 + 1), out.version_minor, HeadError::bad_request_line);
}

HeadError parse_status_line(std::string_view line, ResponseHead& out) {
  const std::size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return HeadError::bad_status_line;
  const HeadError v =
      parse_version(line.substr(0, sp), out.version_minor, HeadError::bad_status_line);
  if (v != HeadError::none) return v;
  const std::string_view rest = line.substr(sp + 1);
  if (rest.size() < 3) return HeadError::bad_status_line;
  int status = 0;
  for (char c : rest.substr(0, 3)) {
    if (c < '0' || c > '9') return HeadError::bad_status_line;
    status = status * 10 + (c - '0');
  }
  if (status < 100 || status > 599) return HeadError::bad_status_line;
  out.status = status;
  // status-line = HTTP-version SP status-code SP [ reason-phrase ]; a missing final SP
  // before an empty reason is common enough to accept.
  if (rest.size() == 3) {
    out.reason = {};
    return HeadError::none;
  }
  if (rest[3] != ' ') return HeadError::bad_status_line;
  out.reason = rest.substr(4);
  if (!all_of(out.reason, kFieldByte)) return HeadError::bad_status_line;
  return HeadError::none;
}

HeadError parse_field(std::string_view line, Header& h) {
  if (line[0] == ' ' || line[0] == '\t') return HeadError::obs_fold;
  std::size_t i = 0;
  for (; i < line.size(); ++i) {
    const char c = line[i];
    if (has(c, kTchar)) continue;
    if (c == ':') break;
    const auto u = static_cast<unsigned char>(c);
    if (u != ' ' && u != '\t' && (u < 0x20 || u == 0x7f)) return HeadError::bad_header_bytes;
    return HeadError::bad_header;  // whitespace before the colon, or a separator
  }
  if (i == 0 || i == line.size()) return HeadError::bad_header;
  std::string_view value = line.substr(i + 1);
  if (!all_of(value, kFieldByte)) return HeadError::bad_header_bytes;
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  h.name = line.substr(0, i);
  h.value = value;
  return HeadError::none;
}

// Field lines from `pos` up to and including the empty line.
ParseResult parse_fields(std::string_view buf, std::size_t max_head, std::string_view win,
                         std::size_t pos, std::vector<Header>& headers, std::size_t& head_size) {
  std::string_view line;
  std::size_t next = 0;
  while (next_line(win, pos, line, next)) {
    if (line.empty()) {
      head_size = next;
      return {ParseState::complete, HeadError::none};
    }
    if (headers.size() == kMaxHeaders) return error(HeadError::too_large);
    Header h;
    const HeadError e = parse_field(line, h);
    if (e != HeadError::none) return error(e);
    headers.push_back(h);
    pos = next;
  }
  return need_more(buf, max_head);
}

void reset_headers(std::vector<Header>& headers) {
  headers.clear();
  if (headers.capacity() < kInitialHeaderCapacity) headers.reserve(kInitialHeaderCapacity);
}

template <typename Head>
std::optional<std::string_view> find_header(const Head& head, std::string_view name) {
  for (const Header& h : head.headers) {
    if (iequals(h.name, name)) return h.value;
  }
  return std::nullopt;
}

}  // namespace

bool is_tchar(unsigned char c) {
  return (kClasses[c] & kTchar) != 0;
}
bool is_field_byte(unsigned char c) {
  return (kClasses[c] & kFieldByte) != 0;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string_view describe(HeadError e) {
  switch (e) {
    case HeadError::none:
      return "no error";
    case HeadError::too_large:
      return "message head too large";
    case HeadError::bad_request_line:
      return "malformed request line";
    case HeadError::bad_version:
      return "unsupported HTTP version";
    case HeadError::bad_header:
      return "malformed header field";
    case HeadError::obs_fold:
      return "folded header line (obs-fold)";
    case HeadError::bad_header_bytes:
      return "invalid byte in header field";
    case HeadError::bad_status_line:
      return "malformed status line";
  }
  return "unknown error";
}

std::optional<std::string_view> RequestHead::find(std::string_view name) const {
  return find_header(*this, name);
}

std::optional<std::string_view> ResponseHead::find(std::string_view name) const {
  return find_header(*this, name);
}

ParseResult parse_request_head(std::string_view buf, std::size_t max_head, RequestHead& out) {
  reset_headers(out.headers);
  out.head_size = 0;
  const std::string_view win = buf.substr(0, max_head);
  std::size_t pos = 0;
  std::size_t next = 0;
  std::string_view line;
  for (int skipped = 0;; ++skipped) {
    if (!next_line(win, pos, line, next)) return need_more(buf, max_head);
    if (!line.empty()) break;
    if (skipped == kMaxLeadingEmptyLines) return error(HeadError::bad_request_line);
    pos = next;
  }
  const HeadError e = parse_request_line(line, out);
  if (e != HeadError::none) return error(e);
  return parse_fields(buf, max_head, win, next, out.headers, out.head_size);
}

ParseResult parse_response_head(std::string_view buf, std::size_t max_head, ResponseHead& out) {
  reset_headers(out.headers);
  out.head_size = 0;
  const std::string_view win = buf.substr(0, max_head);
  std::size_t next = 0;
  std::string_view line;
  if (!next_line(win, 0, line, next)) return need_more(buf, max_head);
  const HeadError e = parse_status_line(line, out);
  if (e != HeadError::none) return error(e);
  return parse_fields(buf, max_head, win, next, out.headers, out.head_size);
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

}  // namespace vibepit::http
