// Requests refused before any rule is asked: an invalid one (its record and its 400), and,
// on a shared gateway (docs/fleet.md), one that does not prove which tenant it is (the
// proof each request carries, and the 407 without it).
#include <algorithm>
#include <optional>

#include <asio/use_awaitable.hpp>

#include "vibepit/http/proxy_auth.hpp"
#include "vibepit/policy/name.hpp"
#include "vibepit/proxy/response.hpp"
#include "vibepit/proxy/session.hpp"
#include "vibepit/proxy/upstream.hpp"
#include "vibepit/proxy/worker.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::proxy {

using asio::ip::tcp;

void Session::record_invalid(std::string_view method, std::string_view host, std::uint16_t port,
                             std::string detail, std::uint64_t tunnel) {
  auto rec = new_record(method.substr(0, 32), host, port);
  rec.tunnel = tunnel;
  rec.reason = policy::Reason::invalid_target;
  rec.detail = std::move(detail);
  rec.status = 400;
  const auto snap = w_.snapshot();
  rec.gen = snap->generation;
  rec.mode = snap->rules.mode;
  emit(std::move(rec));
}

asio::awaitable<void> Session::refuse_invalid(std::string_view method, std::string host,
                                              std::uint16_t port, std::string detail,
                                              std::string message) {
  record_invalid(method, host, port, std::move(detail));
  co_await refuse(400, ProxyError::http_request_error, std::move(message), true);
}

asio::awaitable<void> Session::refuse(int status, ProxyError error, std::string message,
                                      bool close) {
  auto text = make_error_response(status, error, message, close);
  co_await send(text);
  if (close) {
    // Let the response reach the client before the FIN; the deadline timer bounds this.
    asio::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_send, ignored);
  }
}

bool Session::authenticate(const http::RequestHead& head) {
  request_snap_ = w_.snapshot();
  const policy::Snapshot* snap = request_snap_.get();
  if (!snap->tenants) return true;
  std::optional<std::string_view> value;
  for (const auto& h : head.headers) {
    if (!policy::iequals_ascii(h.name, "proxy-authorization")) continue;
    if (value) return false;  // two: which one would be meant?
    value = h.value;
  }
  if (!value) return false;
  // A kept-alive client sends the same field with every request: when it is the one this
  // connection proved under the rules in force, it proves the same tenant again.
  if (tenant_ != policy::kNoTenant && proven_generation_ == snap->generation &&
      *value == std::string_view(proven_.data(), proven_.size())) {
    return true;
  }
  proven_.clear();
  // The decoded token passes through this stack buffer only, wiped before it goes.
  char buf[1100];
  const auto c = http::parse_basic(*value, buf);
  policy::TenantId id = policy::kNoTenant;
  if (c.error == http::BasicError::none) id = policy::authenticate(*snap, c.user, c.password);
  // What was decoded is no longer than the value it came from.
  secret::wipe(buf, std::min(sizeof buf, value->size()));
  if (id == policy::kNoTenant) return false;
  if (id != tenant_) {
    tenant_ = id;
    tenant_name_ = policy::tenant_of(*snap, id)->name;
  }
  if (proven_.capacity() < secret::kNoInline) proven_.reserve(secret::kNoInline);
  proven_.assign(value->data(), value->size());
  proven_generation_ = snap->generation;
  return true;
}

asio::awaitable<void> Session::refuse_unauthenticated(std::string_view method,
                                                      const http::Authority& target) {
  auto rec = new_record(method.substr(0, 32), target.host, target.port);
  rec.tenant.clear();  // whatever an earlier request proved, this one did not
  policy::Decision d;  // a deny in every mode: no rule can allow it
  d.reason = policy::Reason::unauthenticated;
  Outcome o = explain(std::move(d), target.display());
  const auto snap = request_snap_ ? std::exchange(request_snap_, nullptr) : w_.snapshot();
  rec.gen = snap->generation;
  rec.mode = snap->rules.mode;
  record_outcome(rec, o);
  emit(std::move(rec));
  auto text = make_error_response(o.status, o.error, o.text, true,
                                  "Proxy-Authenticate: Basic realm=\"vibepit\"\r\n");
  co_await send(text);
  asio::error_code ignored;
  client_.shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace vibepit::proxy
