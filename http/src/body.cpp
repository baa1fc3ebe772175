// Message framing, the chunked-body validator and the head rewrites. The proxy forwards
// bodies byte for byte, so framing must be unambiguous: whatever could be read two ways
// by the next hop (request smuggling) is refused rather than repaired.
#include "vibepit/http/body.hpp"

#include <charconv>
#include <span>
#include <string>

namespace vibepit::http {
namespace {

constexpr std::size_t kMaxLengthDigits = 19;  // < 2^64, so no overflow
// A larger chunk is no real body (1 TiB), and the bound keeps the size from overflowing;
// leading zeros are bounded by the line length only.
constexpr std::uint64_t kMaxChunkSize = std::uint64_t{1} << 40;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Calls f(element) for each element of a comma-separated list, trimmed, empty ones included.
template <typename F>
void for_each_element(std::string_view list, F&& f) {
  for (;;) {
    const std::size_t comma = list.find(',');
    f(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) return;
    list.remove_prefix(comma + 1);
  }
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!is_tchar(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Every Transfer-Encoding field, read as one list (RFC 9110 5.3).
struct Codings {
  bool present = false;
  bool malformed = false;
  int chunked = 0;
  bool last_chunked = false;
};

Codings read_codings(const std::vector<Header>& headers) {
  Codings c;
  bool any = false;
  for (const Header& h : headers) {
    if (!iequals(h.name, "transfer-encoding")) continue;
    c.present = true;
    for_each_element(h.value, [&](std::string_view el) {
      if (el.empty()) return;  // RFC 9110 5.6.1: empty list elements do not count
      if (!is_token(el)) {     // also refuses transfer-parameters such as "chunked;x=y"
        c.malformed = true;
        return;
      }
      any = true;
      c.last_chunked = iequals(el, "chunked");
      if (c.last_chunked) ++c.chunked;
    });
  }
  if (c.present && !any) c.malformed = true;
  return c;
}

// Every Content-Length field; repeats are allowed only with the same value.
struct Length {
  bool present = false;
  bool malformed = false;
  bool conflicting = false;
  std::uint64_t value = 0;
};

Length read_length(const std::vector<Header>& headers) {
  Length len;
  for (const Header& h : headers) {
    if (!iequals(h.name, "content-length")) continue;
    for_each_element(h.value, [&](std::string_view el) {
      if (el.empty() || el.size() > kMaxLengthDigits) {
        len.malformed = true;
        return;
      }
      std::uint64_t v = 0;
      for (char c : el) {
        if (c < '0' || c > '9') {
          len.malformed = true;
          return;
        }
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      if (len.present && v != len.value) len.conflicting = true;
      len.present = true;
      len.value = v;
    });
  }
  return len;
}

std::variant<Framing, FramingError> length_framing(const Length& len) {
  if (len.malformed) return FramingError{"invalid Content-Length"};
  if (len.conflicting) return FramingError{"conflicting Content-Length"};
  return Framing{BodyKind::length, len.value};
}

bool content_length_present(const std::vector<Header>& headers) {
  for (const Header& h : headers) {
    if (iequals(h.name, "content-length")) return true;
  }
  return false;
}

// Is `name` listed as a token in any Connection field?
bool connection_lists(const std::vector<Header>& headers, std::string_view name) {
  bool found = false;
  for (const Header& h : headers) {
    if (!iequals(h.name, "connection")) continue;
    for_each_element(h.value, [&](std::string_view el) { found = found || iequals(el, name); });
  }
  return found;
}

bool has_connection_field(const std::vector<Header>& headers) {
  for (const Header& h : headers) {
    if (iequals(h.name, "connection")) return true;
  }
  return false;
}

bool is_any_of(std::string_view name, std::span<const std::string_view> names) {
  for (std::string_view n : names) {
    if (iequals(name, n)) return true;
  }
  return false;
}

constexpr std::string_view kFramingFields[] = {"content-length", "transfer-encoding"};

// Hop-by-hop fields (RFC 9110 7.6.1) and the fields named by Connection. The framing
// fields stay even when Connection lists them: the body is forwarded raw, and dropping
// its length would let it be read as the next message.
bool drop_field(const std::vector<Header>& headers, bool listed_possible, std::string_view name,
                std::span<const std::string_view> hop_by_hop) {
  if (is_any_of(name, hop_by_hop)) return true;
  if (!listed_possible || is_any_of(name, kFramingFields)) return false;
  return connection_lists(headers, name);
}

// The fields that go on, in order. A valid Content-Length goes on as one field in canonical
// form ("5", not "005" or "5, 5" or two fields), where the first one was: the next hop
// reads exactly the length that framed the body here.
// `extra` (whole field lines) goes last, before the blank line.
void append_fields(std::string& out, const std::vector<Header>& headers,
                   std::span<const std::string_view> hop_by_hop, std::string_view also_drop = {},
                   std::string_view extra = {}) {
  const bool listed_possible = has_connection_field(headers);
  const Length len = read_length(headers);
  const bool canonical_length = len.present && !len.malformed && !len.conflicting;
  bool length_written = false;
  for (const Header& h : headers) {
    if (drop_field(headers, listed_possible, h.name, hop_by_hop)) continue;
    if (!also_drop.empty() && iequals(h.name, also_drop)) continue;
    if (canonical_length && iequals(h.name, "content-length")) {
      if (!length_written) {
        char digits[20];
        const auto end = std::to_chars(digits, digits + sizeof digits, len.value).ptr;
        out.append("Content-Length: ")
            .append(digits, static_cast<std::size_t>(end - digits))
            .append("\r\n");
      }
      length_written = true;
      continue;
    }
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append(extra);
  out.append("\r\n");
}

std::size_t fields_size(const std::vector<Header>& headers) {
  std::size_t n = 2;
  for (const Header& h : headers) n += h.name.size() + h.value.size() + 4;
  return n;
}

}  // namespace

std::variant<Framing, FramingError> request_framing(const RequestHead& head) {
  const Codings te = read_codings(head.headers);
  if (te.present) {
    if (head.version_minor == 0) return FramingError{"Transfer-Encoding in an HTTP/1.0 request"};
    if (content_length_present(head.headers)) {
      return FramingError{"both Content-Length and Transfer-Encoding"};
    }
    if (te.malformed) return FramingError{"invalid Transfer-Encoding"};
    if (te.chunked != 1 || !te.last_chunked) return FramingError{"unsupported transfer-coding"};
    return Framing{BodyKind::chunked, 0};
  }
  const Length len = read_length(head.headers);
  if (!len.present && !len.malformed) return Framing{BodyKind::none, 0};
  return length_framing(len);
}

std::variant<Framing, FramingError> response_framing(const ResponseHead& head,
                                                     std::string_view request_method) {
  if (request_method == "HEAD" || (head.status >= 100 && head.status < 200) || head.status == 204 ||
      head.status == 304) {
    return Framing{BodyKind::none, 0};
  }
  const Codings te = read_codings(head.headers);
  if (te.present) {
    if (content_length_present(head.headers)) {
      return FramingError{"both Content-Length and Transfer-Encoding"};
    }
    if (te.malformed) return FramingError{"invalid Transfer-Encoding"};
    if (te.chunked > 1 || (te.chunked == 1 && !te.last_chunked)) {
      return FramingError{"unsupported transfer-coding"};
    }
    // RFC 9112 6.3: a final coding other than chunked means the body ends at close.
    return Framing{te.last_chunked ? BodyKind::chunked : BodyKind::until_close, 0};
  }
  const Length len = read_length(head.headers);
  if (!len.present && !len.malformed) return Framing{BodyKind::until_close, 0};
  return length_framing(len);
}

ChunkedDecoder::ChunkedDecoder(std::size_t max_line, std::size_t max_trailers)
    : max_line_(max_line), max_trailers_(max_trailers) {}

bool ChunkedDecoder::fail(std::string_view why) {
  state_ = State::failed;
  error_ = why;
  return false;
}

bool ChunkedDecoder::step(unsigned char c) {
  // Line lengths count the bytes before CRLF; the trailer section counts every byte.
  bool trailer = false;
  switch (state_) {
    case State::trailer_start:
    case State::trailer_name:
    case State::trailer_value:
      trailer = true;
      [[fallthrough]];
    case State::size:
    case State::size_ws:
    case State::size_ext:
      if (c != '\r' && ++line_len_ > max_line_) {
        return fail(trailer ? "trailer line too long" : "chunk size line too long");
      }
      break;
    case State::trailer_lf:
    case State::final_lf:
      trailer = true;
      break;
    default:
      break;
  }
  if (trailer && ++trailer_bytes_ > max_trailers_) return fail("trailer section too large");
  switch (state_) {
    case State::size: {
      int digit = -1;
      if (c >= '0' && c <= '9') digit = c - '0';
      if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      if (digit >= 0) {
        ++size_digits_;
        remaining_ = remaining_ * 16 + static_cast<std::uint64_t>(digit);
        if (remaining_ > kMaxChunkSize) return fail("chunk size larger than 2^40 bytes");
        return true;
      }
      if (size_digits_ == 0) return fail("invalid chunk size");
      if (c == '\r')
        state_ = State::size_lf;
      else if (c == ';')
        state_ = State::size_ext;
      else if (c == ' ' || c == '\t')
        state_ = State::size_ws;
      else
        return fail("invalid chunk size");
      return true;
    }
    case State::size_ws:
      if (c == ';')
        state_ = State::size_ext;
      else if (c != ' ' && c != '\t')
        return fail("invalid chunk extension");
      return true;
    case State::size_ext:
      if (c == '\r')
        state_ = State::size_lf;
      else if (!is_field_byte(c))
        return fail("invalid byte in chunk extension");
      return true;
    case State::size_lf:
      if (c != '\n') return fail("expected LF after chunk size");
      state_ = remaining_ == 0 ? State::trailer_start : State::data;
      size_digits_ = 0;
      line_len_ = 0;
      return true;
    case State::data_cr:
      if (c != '\r') return fail("missing CRLF after chunk data");
      state_ = State::data_lf;
      return true;
    case State::data_lf:
      if (c != '\n') return fail("missing CRLF after chunk data");
      state_ = State::size;
      return true;
    case State::trailer_start:
      if (c == '\r')
        state_ = State::final_lf;
      else if (is_tchar(c))
        state_ = State::trailer_name;
      else
        return fail(c == ' ' || c == '\t' ? "folded trailer line" : "invalid trailer field");
      return true;
    case State::trailer_name:
      if (c == ':')
        state_ = State::trailer_value;
      else if (!is_tchar(c))
        return fail("invalid trailer field");
      return true;
    case State::trailer_value:
      if (c == '\r')
        state_ = State::trailer_lf;
      else if (!is_field_byte(c))
        return fail("invalid byte in trailer field");
      return true;
    case State::trailer_lf:
      if (c != '\n') return fail("expected LF after trailer field");
      state_ = State::trailer_start;
      line_len_ = 0;
      return true;
    case State::final_lf:
      if (c != '\n') return fail("expected LF at end of chunked body");
      state_ = State::done;
      return true;
    case State::data:
    case State::done:
    case State::failed:
      break;
  }
  return fail("internal decoder state");
}

ChunkedDecoder::Step ChunkedDecoder::feed(std::string_view data) {
  return feed_into(data, nullptr);
}

ChunkedDecoder::Step ChunkedDecoder::feed(std::string_view data, std::string& payload) {
  return feed_into(data, &payload);
}

ChunkedDecoder::Step ChunkedDecoder::feed_into(std::string_view data, std::string* payload) {
  std::size_t i = 0;
  while (i < data.size()) {
    if (state_ == State::done) return {Status::done, i};
    if (state_ == State::failed) return {Status::error, i};
    if (state_ == State::data) {
      const std::size_t avail = data.size() - i;
      const std::size_t n = remaining_ < avail ? static_cast<std::size_t>(remaining_) : avail;
      if (payload) payload->append(data.substr(i, n));
      i += n;
      remaining_ -= n;
      if (remaining_ == 0) state_ = State::data_cr;
      continue;
    }
    if (!step(static_cast<unsigned char>(data[i]))) return {Status::error, i};
    ++i;
  }
  if (state_ == State::done) return {Status::done, i};
  if (state_ == State::failed) return {Status::error, i};
  return {Status::need_more, i};
}

namespace {

constexpr std::string_view kRequestHopByHop[] = {
    "host",       "connection", "proxy-connection", "proxy-authorization",
    "keep-alive", "te",         "trailer",          "upgrade"};
constexpr std::string_view kResponseHopByHop[] = {"connection",
                                                  "proxy-connection",
                                                  "proxy-authenticate",
                                                  "proxy-authorization",
                                                  "keep-alive",
                                                  "te",
                                                  "trailer",
                                                  "upgrade"};

void append_request_line(std::string& out, const RequestHead& head, std::string_view origin_path,
                         std::size_t host_size) {
  out.reserve(out.size() + head.method.size() + origin_path.size() + host_size + 32 +
              fields_size(head.headers));
  out.append(head.method).append(" ").append(origin_path).append(" HTTP/1.1\r\n");
  out.append("Host: ");
}

}  // namespace

std::string rewrite_request_head(const RequestHead& head, std::string_view origin_path,
                                 std::string_view host_header, bool drop_expect) {
  std::string out;
  append_request_line(out, head, origin_path, host_header.size());
  out.append(host_header).append("\r\n");
  append_fields(out, head.headers, kRequestHopByHop, drop_expect ? "expect" : "");
  return out;
}

void append_request_head(std::string& out, const RequestHead& head, std::string_view origin_path,
                         const Authority& authority, bool drop_expect, std::uint16_t default_port) {
  append_request_line(out, head, origin_path, authority.host.size() + 8);
  if (authority.port == default_port) {
    policy::append_bracketed_host(out, authority.host);
  } else {
    policy::append_host_port(out, authority.host, authority.port);
  }
  out.append("\r\n");
  append_fields(out, head.headers, kRequestHopByHop, drop_expect ? "expect" : "");
}

std::string rewrite_response_head(const ResponseHead& head) {
  std::string out;
  append_response_head(out, head);
  return out;
}

void append_response_head(std::string& out, const ResponseHead& head,
                          std::string_view extra_fields) {
  out.reserve(out.size() + head.reason.size() + 16 + fields_size(head.headers) +
              extra_fields.size());
  char status[12];
  const auto end = std::to_chars(status, status + sizeof status, head.status).ptr;
  out.append("HTTP/1.1 ").append(status, static_cast<std::size_t>(end - status)).append(" ");
  out.append(head.reason).append("\r\n");
  append_fields(out, head.headers, kResponseHopByHop, {}, extra_fields);
}

bool wants_keep_alive(int version_minor, const std::vector<Header>& headers) {
  if (connection_lists(headers, "close")) return false;
  if (version_minor >= 1) return true;
  return connection_lists(headers, "keep-alive");
}

}  // namespace vibepit::http
