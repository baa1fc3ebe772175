// libFuzzer target: request and response heads, framing, the chunked validator, the
// rewrites and Proxy-Authorization's Basic credentials. Invariants are checked with CHECK, which
// aborts even in release builds.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "vibepit/http/authority.hpp"
#include "vibepit/http/body.hpp"
#include "vibepit/http/head.hpp"
#include "vibepit/http/proxy_auth.hpp"

namespace {

using namespace vibepit::http;

constexpr std::size_t kMaxHead = 4096;

bool within(std::string_view outer, std::string_view inner) {
  return inner.empty() || (inner.data() >= outer.data() &&
                           inner.data() + inner.size() <= outer.data() + outer.size());
}

template <typename Head>
void check_fields(std::string_view in, const Head& head) {
  CHECK(head.head_size <= in.size());
  CHECK(head.head_size <= kMaxHead);
  CHECK(head.headers.size() <= 100);
  for (const Header& h : head.headers) {
    CHECK(!h.name.empty());
    CHECK(within(in.substr(0, head.head_size), h.name));
    CHECK(within(in.substr(0, head.head_size), h.value));
    for (char c : h.name) CHECK(is_tchar(static_cast<unsigned char>(c)));
    for (char c : h.value) CHECK(is_field_byte(static_cast<unsigned char>(c)));
    if (!h.value.empty()) {
      CHECK(h.value.front() != ' ' && h.value.front() != '\t');
      CHECK(h.value.back() != ' ' && h.value.back() != '\t');
    }
  }
}

// Feeds `body` in pieces whose sizes come from `sizes`; returns status and consumed.
std::pair<ChunkedDecoder::Status, std::size_t> feed(std::string_view body, std::string_view sizes) {
  ChunkedDecoder d(64, 256);
  std::size_t pos = 0;
  std::size_t k = 0;
  for (;;) {
    std::size_t n = body.size() - pos;
    if (!sizes.empty()) {
      const auto piece = static_cast<unsigned char>(sizes[k++ % sizes.size()]);
      n = std::min<std::size_t>(n, 1 + (piece & 0x1f));
    }
    const auto step = d.feed(body.substr(pos, n));
    CHECK(step.consumed <= n);
    pos += step.consumed;
    if (step.status != ChunkedDecoder::Status::need_more) {
      CHECK(step.status == ChunkedDecoder::Status::done || !d.error().empty());
      return {step.status, pos};
    }
    CHECK(step.consumed == n);
    if (pos == body.size()) return {step.status, pos};
  }
}

void check_chunked(std::string_view body, std::string_view sizes) {
  const auto whole = feed(body, {});
  const auto split = feed(body, sizes);
  CHECK(whole == split);
  const auto bytes = feed(body, std::string_view("\x01", 1));
  CHECK(whole == bytes);
}

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 3) {
    std::uint32_t v = static_cast<std::uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<std::uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<std::uint8_t>(in[i + 2]);
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < in.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

// Decoded credentials lie in the buffer, hold no control byte, and the user has no ':';
// encoding them again gives a value that decodes to the same.
void check_basic(std::string_view value) {
  char buf[64];
  const BasicCredentials c = parse_basic(value, buf);
  CHECK(!describe(c.error).empty());
  if (c.error != BasicError::none) {
    CHECK(c.user.empty() && c.password.empty());
    return;
  }
  const std::string_view all(buf, sizeof buf);
  CHECK(within(all, c.user) && within(all, c.password));
  CHECK(c.user.find(':') == std::string_view::npos);
  for (std::string_view part : {c.user, c.password}) {
    for (char ch : part) CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f);
  }
  const std::string again = "basic " + base64(std::string(c.user) + ":" + std::string(c.password));
  char buf2[64];
  const BasicCredentials d = parse_basic(again, buf2);
  CHECK(d.error == BasicError::none && d.user == c.user && d.password == c.password);
}

void check_request(std::string_view in, std::string_view sizes) {
  RequestHead head;
  const ParseResult r = parse_request_head(in, kMaxHead, head);
  CHECK((r.state == ParseState::error) == (r.error != HeadError::none));
  CHECK(!describe(r.error).empty());
  if (r.state == ParseState::incomplete) CHECK(in.size() < kMaxHead);
  if (r.state != ParseState::complete) return;
  check_fields(in, head);
  for (const Header& h : head.headers) {
    if (h.name.size() == 19) check_basic(h.value);  // Proxy-Authorization's length
  }
  CHECK(!head.method.empty() && !head.target.empty());
  CHECK(head.version_minor == 0 || head.version_minor == 1);

  // The head alone parses the same; one byte less is not a complete head.
  RequestHead again;
  CHECK(parse_request_head(in.substr(0, head.head_size), kMaxHead, again).state ==
        ParseState::complete);
  CHECK(again.head_size == head.head_size && again.headers.size() == head.headers.size());
  CHECK(parse_request_head(in.substr(0, head.head_size - 1), kMaxHead, again).state !=
        ParseState::complete);

  const auto framing = request_framing(head);
  if (const auto* f = std::get_if<Framing>(&framing)) {
    if (f->kind == BodyKind::chunked) check_chunked(in.substr(head.head_size), sizes);
    CHECK(f->kind != BodyKind::until_close);
  }
  (void)wants_keep_alive(head.version_minor, head.headers);

  // A rewritten head is a valid head with the same number of fields or fewer, and keeps
  // the framing it had.
  const auto target = parse_target(head.method, head.target);
  const Target* t = std::get_if<Target>(&target);
  const std::string path = t && t->form == TargetForm::absolute ? t->path : "/";
  const std::string host = t && t->form != TargetForm::origin ? t->authority.display() : "a";
  const std::string out = rewrite_request_head(head, path, host);
  RequestHead rewritten;
  const ParseResult rr = parse_request_head(out, out.size() + 1, rewritten);
  CHECK(rr.state == ParseState::complete || rr.error == HeadError::too_large);
  if (rr.state != ParseState::complete) return;
  CHECK(rewritten.head_size == out.size());
  CHECK(rewritten.headers.size() <= head.headers.size() + 1);
  CHECK(!rewritten.find("connection") && !rewritten.find("proxy-authorization"));
  if (head.version_minor == 0) return;  // the rewrite speaks 1.1, where TE is allowed
  const auto framing2 = request_framing(rewritten);
  CHECK(framing.index() == framing2.index());
  if (const auto* f = std::get_if<Framing>(&framing)) {
    const auto& f2 = std::get<Framing>(framing2);
    CHECK(f->kind == f2.kind && f->length == f2.length);
  }
}

void check_response(std::string_view in) {
  ResponseHead head;
  const ParseResult r = parse_response_head(in, kMaxHead, head);
  CHECK((r.state == ParseState::error) == (r.error != HeadError::none));
  if (r.state != ParseState::complete) return;
  check_fields(in, head);
  CHECK(head.status >= 100 && head.status <= 599);
  (void)response_framing(head, "GET");
  (void)response_framing(head, "HEAD");
  const std::string out = rewrite_response_head(head);
  ResponseHead rewritten;
  const ParseResult rr = parse_response_head(out, out.size() + 1, rewritten);
  CHECK(rr.state == ParseState::complete);
  CHECK(rewritten.status == head.status && rewritten.reason == head.reason);
  CHECK(rewritten.head_size == out.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The first byte shapes the split sizes used for the chunked decoder.
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string_view sizes = all.substr(0, std::min<std::size_t>(all.size(), 4));
  std::string_view in = all.substr(sizes.size());
  check_request(in, sizes);
  check_response(in);
  check_chunked(in, sizes);
  check_basic(in);
  return 0;
}
