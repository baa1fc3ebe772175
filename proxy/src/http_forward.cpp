// Plain-HTTP forwarding (absolute-form requests): each request on a client connection is
// decided on its own, then forwarded in origin-form with hop-by-hop headers removed;
// bodies pass through unchanged, framed exactly as parsed. Allowed requests are short: one
// record, written when the response is done, carries both the decision and the totals.
#include <optional>

#include "exchange.hpp"

namespace vibepit::proxy {
namespace exchange_detail {

// The Host header must name the same authority as the URI, or the request is ambiguous.
// Empty when it does (or, in HTTP/1.0, when there is none).
std::string host_header_problem(const http::RequestHead& head, const http::Authority& auth,
                                std::uint16_t default_port) {
  std::optional<std::string_view> host_header;
  int host_count = 0;
  for (const auto& h : head.headers) {
    if (http::iequals(h.name, "host")) {
      ++host_count;
      host_header = h.value;
    }
  }
  if (host_count > 1) return "more than one Host header";
  if (!host_header) {
    return head.version_minor == 1 ? "HTTP/1.1 request without a Host header" : "";
  }
  // Parsed into this thread's one Authority, which keeps its capacity: the check runs to
  // its end without a suspension, and a warm request allocates nothing for it.
  thread_local http::Authority h;
  const auto bad = http::parse_authority(
      *host_header,
      auth.port == default_port ? std::optional<std::uint16_t>(default_port) : std::nullopt, h);
  if (!bad && h.host == auth.host && h.port == auth.port) return "";
  return "the Host header \"" + std::string(host_header->substr(0, 256)) +
         "\" does not match the request URI authority " + auth.display();
}

std::variant<Checked, Invalid> check_request(const http::RequestHead& head,
                                             const http::Authority& auth,
                                             std::uint16_t default_port) {
  if (auto problem = host_header_problem(head, auth, default_port); !problem.empty()) {
    return Invalid{problem, problem};
  }
  auto framing_or = http::request_framing(head);
  if (auto* err = std::get_if<http::FramingError>(&framing_or)) {
    return Invalid{err->what, "refused request framing: " + err->what};
  }
  Checked c;
  c.framing = std::get<http::Framing>(framing_or);
  c.client_keep_alive = http::wants_keep_alive(head.version_minor, head.headers);
  if (auto e = head.find("expect")) c.expect_continue = http::iequals(*e, "100-continue");
  return c;
}

}  // namespace exchange_detail
namespace {

using namespace exchange_detail;

// A plain client connection's ends: the sockets themselves.
struct PlainEnds {
  Session& s;
  Session& session() { return s; }
  asio::ip::tcp::socket& client() { return s.client(); }
  asio::ip::tcp::socket& upstream() { return s.upstream(); }
  asio::awaitable<bool> send(std::string_view bytes) { return s.send(bytes); }
  asio::awaitable<void> refuse(int status, ProxyError error, std::string message, bool close) {
    return s.refuse(status, error, std::move(message), close);
  }
};

}  // namespace

asio::awaitable<bool> forward_http(Session& s, const http::RequestHead& head,
                                   const http::Target& target) {
  const auto& auth = target.authority;
  auto checked = check_request(head, auth, 80);
  if (auto* bad = std::get_if<Invalid>(&checked)) {
    co_await s.refuse_invalid(head.method, auth.host, auth.port, std::move(bad->detail),
                              std::move(bad->message));
    co_return false;
  }
  const Checked& req = std::get<Checked>(checked);

  const std::string method(head.method);
  // With 100-continue we answer the 100 ourselves once the request is allowed, so the
  // expectation does not go upstream.
  std::string upstream_head;
  const Lease head_text(s.text_spares(), upstream_head);
  http::append_request_head(upstream_head, head, target.path, auth, req.expect_continue);
  s.client_bytes().consume(head.head_size);  // `head` views are invalid from here on

  auto& rec = s.record();
  rec = s.new_record(method, auth.host, auth.port);
  s.request_line().method = method;
  s.request_line().target = target.path;
  auto dial = co_await s.decide_and_dial(auth, rec, true, true);
  s.mark_decided(rec);
  if (s.closed()) co_return false;
  if (!dial.ok) {
    s.emit(std::move(rec));
    // A body we will not forward would be read as the next request: close instead.
    bool close = req.framing.kind != http::BodyKind::none || !req.client_keep_alive;
    co_await s.refuse(dial.status, dial.error, std::move(dial.message), close);
    co_return !close && !s.closed();
  }
  // Where method/path rules matched the normalised path, that is the path that goes
  // upstream, so that the server reads what the rules read.
  s.apply_normal_path(upstream_head);
  PlainEnds ends{s};
  const bool keep_client = co_await exchange(ends, method, upstream_head, req, rec);
  s.emit(std::move(rec));
  co_return keep_client && !s.closed() && !s.draining();
}

}  // namespace vibepit::proxy
