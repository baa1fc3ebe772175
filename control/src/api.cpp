#include "vibepit/control/api.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include <nlohmann/json.hpp>

#include "api_responses.hpp"
#include "vibepit/http/head.hpp"

namespace vibepit::control {
namespace {

using json = nlohmann::json;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty() || s.size() > 20) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

Framed frame_error(int status, std::string why) {
  Framed f;
  f.state = FrameState::error;
  f.status = status;
  f.error = std::move(why);
  return f;
}

json ask_json(const AskSettings& a) {
  return {{"enabled", a.enabled},
          {"timeout_ms", a.timeout_ms},
          {"max_per_client", a.max_per_client},
          {"max", a.max_total}};
}

// Each tenant's own rules, by name: {"NAME": {"allow-http": [...], "allow-dns": [...]}}.
// Never a token.
json tenant_rules(const policy::Snapshot& snap) {
  json out = json::object();
  if (snap.tenants) {
    for (const auto& t : *snap.tenants) {
      out[t.name] = {{"allow-http", t.allow_http.to_vector()},
                     {"allow-dns", t.allow_dns.to_vector()}};
    }
  }
  return out;
}

// Each credential as NAME=HOST:PORT,header=H,format=F: never a value.
json credential_texts(const policy::Snapshot& snap) {
  json out = json::array();
  if (snap.credentials) {
    for (const auto& c : *snap.credentials) out.push_back(c.spec.text());
  }
  return out;
}

}  // namespace

ApiResponse json_response(int status, const nlohmann::json& j) {
  ApiResponse r;
  r.status = status;
  r.body = j.dump() + "\n";
  return r;
}

ApiResponse method_not_allowed(const char* allow) {
  auto r = error_response(405, std::string("method not allowed; use ") + allow);
  r.headers.emplace_back("Allow", allow);
  return r;
}

std::string error_json(std::string_view message) {
  return json{{"error", std::string(message)}}.dump(-1, ' ', false,
                                                    json::error_handler_t::replace) +
         "\n";
}

ApiResponse error_response(int status, std::string_view message) {
  ApiResponse r;
  r.status = status;
  r.body = error_json(message);
  return r;
}

std::string serialize(const ApiResponse& r, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " +
                    std::string(http::reason_phrase(r.status)) +
                    "\r\nContent-Type: " + r.content_type + "\r\nCache-Control: no-store\r\n";
  for (const auto& [k, v] : r.headers) out += k + ": " + v + "\r\n";
  if (r.follow) {
    out += "Transfer-Encoding: chunked\r\n";
  } else {
    out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  }
  if (!keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  if (!r.follow) out += r.body;
  return out;
}

std::string feed_line(const DecisionFeed::Entry& e) {
  // Records are JSON objects: put the sequence number first without re-parsing them.
  std::string out = "{\"seq\":" + std::to_string(e.seq);
  if (e.line.size() > 2 && e.line[0] == '{' && e.line[1] != '}') {
    out += ',';
    out.append(e.line, 1);
  } else {
    out += "}\n";
  }
  if (out.back() != '\n') out += '\n';
  return out;
}

Framed frame_request(std::string_view buf, const ApiLimits& limits, ApiRequest& out) {
  http::RequestHead head;
  auto r = http::parse_request_head(buf, limits.max_head, head);
  if (r.state == http::ParseState::incomplete) return {};
  if (r.state == http::ParseState::error) {
    if (r.error == http::HeadError::too_large) {
      return frame_error(431,
                         "request head larger than " + std::to_string(limits.max_head) + " bytes");
    }
    return frame_error(400, "malformed request: " + std::string(http::describe(r.error)));
  }
  if (head.target.empty() || head.target[0] != '/') {
    return frame_error(400, "the request target must be a path, such as /v1/rules");
  }
  out = ApiRequest{};
  out.method = std::string(head.method);
  auto q = head.target.find('?');
  auto path = head.target.substr(0, q);
  auto decoded = percent_decode(path);
  if (!decoded) return frame_error(400, "bad percent-encoding in the path");
  out.path = std::move(*decoded);
  if (q != std::string_view::npos) {
    auto query = head.target.substr(q + 1);
    while (!query.empty()) {
      auto amp = query.find('&');
      auto part = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (part.empty()) continue;
      auto eq = part.find('=');
      auto k = percent_decode(part.substr(0, eq));
      auto v =
          percent_decode(eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1));
      if (!k || !v) return frame_error(400, "bad percent-encoding in the query");
      out.query.emplace_back(std::move(*k), std::move(*v));
    }
  }
  auto connection = head.find("Connection");
  out.keep_alive = head.version_minor >= 1;
  if (connection && http::iequals(*connection, "close")) out.keep_alive = false;
  if (connection && http::iequals(*connection, "keep-alive")) out.keep_alive = true;

  if (head.find("Transfer-Encoding")) {
    return frame_error(501, "Transfer-Encoding is not supported here; send Content-Length");
  }
  std::size_t body_len = 0;
  int lengths = 0;
  for (const auto& h : head.headers) {
    if (!http::iequals(h.name, "Content-Length")) continue;
    auto v = parse_u64(h.value);
    if (!v) return frame_error(400, "invalid Content-Length");
    if (lengths++ && *v != body_len) return frame_error(400, "conflicting Content-Length");
    if (*v > limits.max_body) {
      return frame_error(413,
                         "request body larger than " + std::to_string(limits.max_body) + " bytes");
    }
    body_len = static_cast<std::size_t>(*v);
  }
  if ((out.method == "POST" || out.method == "PUT") && lengths == 0) {
    return frame_error(411, out.method + " needs a Content-Length");
  }
  if (buf.size() - head.head_size < body_len) return {};
  // On the heap from the first byte, where freeing wipes it (a secret's value may be in it).
  out.body.reserve(std::max(body_len, secret::kNoInline));
  out.body.assign(buf.substr(head.head_size, body_len));
  Framed f;
  f.state = FrameState::complete;
  f.consumed = head.head_size + body_len;
  return f;
}

ApiResponse ControlApi::handle(const ApiRequest& req) const {
  const auto& p = req.path;
  const bool get = req.method == "GET";
  if (p == "/v1/health") {
    if (!get) return method_not_allowed("GET");
    return json_response(200, {{"status", "ok"}, {"generation", store_.generation()}});
  }
  if (p == "/v1/rules") {
    if (!get) return method_not_allowed("GET");
    return rules_view();
  }
  if (p == "/v1/allow-http" || p == "/v1/allow-dns") {
    if (req.method != "POST") return method_not_allowed("POST");
    return add_rules(p == "/v1/allow-http" ? RuleList::allow_http : RuleList::allow_dns, req);
  }
  if (p == "/v1/mode") {
    if (req.method != "POST") return method_not_allowed("POST");
    return set_mode(req);
  }
  if (p == "/v1/decisions") {
    if (!get) return method_not_allowed("GET");
    return decisions(req);
  }
  if (p == "/v1/stats") {
    if (!get) return method_not_allowed("GET");
    ApiResponse r;
    r.body = stats_.stats_json();
    return r;
  }
  if (p == "/v1/pending" || p == "/v1/pending/refuse" || p == "/v1/ask") {
    if (!pending_) return error_response(404, "ask mode is not available in this proxy");
    if (p == "/v1/pending") {
      if (!get) return method_not_allowed("GET");
      return pending_view();
    }
    if (req.method != "POST") {
      if (p == "/v1/ask" && get) return json_response(200, ask_json(pending_->ask()));
      return method_not_allowed(p == "/v1/ask" ? "GET, POST" : "POST");
    }
    return p == "/v1/ask" ? set_ask(req) : refuse_pending(req);
  }
  if (p == "/v1/secrets" || p.starts_with("/v1/secrets/")) return secrets(req);
  if (p == "/v1/inspect-ca") {
    if (!get) return method_not_allowed("GET");
    if (inspect_ca_.empty()) return error_response(404, "this proxy has no inspection CA");
    ApiResponse r;
    r.content_type = "application/x-pem-file";
    r.body = inspect_ca_;
    return r;
  }
  if (p == "/metrics") {
    if (!get) return method_not_allowed("GET");
    ApiResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = stats_.prometheus();
    return r;
  }
  return error_response(404,
                        "no such endpoint: " + p.substr(0, 200) + " (see docs/control-api.md)");
}

ApiResponse ControlApi::rules_view() const {
  auto snap = store_.current();
  return json_response(200, {{"generation", snap->generation},
                             {"mode", policy::to_string(snap->rules.mode)},
                             {"allow-http", snap->rules.allow_http.to_vector()},
                             {"allow-dns", snap->rules.allow_dns.to_vector()},
                             {"block-cidr", snap->rules.block_cidr},
                             {"credentials", credential_texts(*snap)},
                             {"tenants", tenant_rules(*snap)}});
}

ApiResponse ControlApi::add_rules(RuleList list, const ApiRequest& req) const {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return error_response(400, "the body is not valid JSON; send {\"entries\": [\"...\"]}");
  }
  if (!body.is_object() || !body.contains("entries") || !body["entries"].is_array()) {
    return error_response(400, "the body must be {\"entries\": [\"...\"]}");
  }
  policy::TenantId tenant = policy::kNoTenant;
  for (const auto& [k, v] : body.items()) {
    if (k == "tenant") {
      // A tenant's own rules; the top level's when absent.
      const auto snap = store_.current();
      if (v.is_string()) tenant = policy::find_tenant(*snap, v.get<std::string>());
      if (tenant == policy::kNoTenant) {
        return error_response(400,
                              "\"tenant\" must name a tenant of the configuration" +
                                  std::string(snap->tenants ? "" : ", and this proxy has none"));
      }
    } else if (k != "entries") {
      return error_response(400, "unknown key \"" + k.substr(0, 64) + "\"");
    }
  }
  const auto& arr = body["entries"];
  if (arr.empty()) return error_response(400, "\"entries\" is empty");
  if (arr.size() > limits_.max_entries) {
    return error_response(413, "too many entries in one request (" + std::to_string(arr.size()) +
                                   " > " + std::to_string(limits_.max_entries) +
                                   "); send them in several requests");
  }
  std::vector<std::string> entries;
  entries.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string()) {
      return error_response(400, "entries[" + std::to_string(i) + "] is not a string");
    }
    entries.push_back(arr[i].get<std::string>());
  }
  auto result = rules_.add(list, entries, tenant);
  if (auto* errors = std::get_if<std::vector<policy::RuleError>>(&result)) {
    json details = json::array();
    for (const auto& e : *errors) {
      details.push_back({{"entry", e.entry}, {"error", e.what}, {"message", e.message()}});
    }
    std::string first = errors->front().message();
    if (errors->size() > 1) first += " (and " + std::to_string(errors->size() - 1) + " more)";
    json j = {{"error", first + "; nothing was applied"}, {"errors", details}};
    ApiResponse r;
    r.status = 400;
    r.body = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    return r;
  }
  const auto& ok = std::get<AddResult>(result);
  return json_response(
      200, {{"added", ok.added}, {"existing", ok.existing}, {"generation", ok.generation}});
}

ApiResponse ControlApi::set_mode(const ApiRequest& req) const {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const auto mode =
      body.is_object() && body.size() == 1 && body.contains("mode") && body["mode"].is_string()
          ? policy::parse_mode(body["mode"].get<std::string>())
          : std::nullopt;
  if (!mode) return error_response(400, "the body must be {\"mode\": \"enforce\" or \"audit\"}");
  bool changed = false;
  const auto generation = rules_.set_mode(*mode, changed);
  return json_response(
      200, {{"mode", policy::to_string(*mode)}, {"changed", changed}, {"generation", generation}});
}

ApiResponse ControlApi::decisions(const ApiRequest& req) const {
  std::uint64_t after = 0, limit = 100;
  bool follow = false, has_after = false;
  for (const auto& [k, v] : req.query) {
    if (k == "after") {
      auto n = parse_u64(v);
      if (!n) return error_response(400, "after must be a record sequence number");
      after = *n;
      has_after = true;
    } else if (k == "limit") {
      auto n = parse_u64(v);
      if (!n || *n == 0 || *n > limits_.max_page) {
        return error_response(400,
                              "limit must be between 1 and " + std::to_string(limits_.max_page));
      }
      limit = *n;
    } else if (k == "follow") {
      if (v != "0" && v != "1") return error_response(400, "follow must be 0 or 1");
      follow = v == "1";
    } else {
      return error_response(
          400, "unknown query parameter \"" + k.substr(0, 64) + "\" (after, limit, follow)");
    }
  }
  if (follow) {
    ApiResponse r;
    r.content_type = "application/x-ndjson";
    r.follow = true;
    r.follow_after = has_after ? after : feed_.last_seq();  // from now on, by default
    return r;
  }
  std::uint64_t lost = 0;
  auto entries = feed_.since(after, static_cast<std::size_t>(limit), lost);
  if (!has_after) lost = 0;  // a first read has not fallen behind anything
  std::uint64_t next = entries.empty() ? after : entries.back().seq;
  std::string body =
      "{\"lost\":" + std::to_string(lost) + ",\"next\":" + std::to_string(next) + ",\"records\":[";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i) body += ',';
    auto line = feed_line(entries[i]);
    line.pop_back();  // the newline
    body += line;
  }
  body += "]}\n";
  ApiResponse r;
  r.body = std::move(body);
  return r;
}

ApiResponse ControlApi::pending_view() const {
  json list = json::array();
  for (const auto& p : pending_->pending()) {
    list.push_back({{"id", p.id},
                    {"method", p.method},
                    {"host", p.host},
                    {"port", p.port},
                    {"client", p.client},
                    {"since_us", p.since_us},
                    {"waited_ms", p.waited_ms},
                    {"expires_in_ms", p.expires_in_ms}});
  }
  ApiResponse r;
  r.body = json{{"ask", ask_json(pending_->ask())}, {"pending", list}}.dump(
               -1, ' ', false, json::error_handler_t::replace) +
           "\n";
  return r;
}

ApiResponse ControlApi::refuse_pending(const ApiRequest& req) const {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object() || body.size() != 1 || !body.contains("id") ||
      !body["id"].is_number_unsigned()) {
    return error_response(400, "the body must be {\"id\": N}, N a held request's id");
  }
  const auto id = body["id"].get<std::uint64_t>();
  if (!pending_->refuse(id)) {
    return error_response(404, "no request " + std::to_string(id) +
                                   " is held (it was released, refused or expired, or never "
                                   "held)");
  }
  return json_response(200, {{"refused", id}});
}

ApiResponse ControlApi::set_ask(const ApiRequest& req) const {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  const char* shape =
      "the body must be {\"enabled\": true or false, \"timeout_ms\": N}, either or both "
      "(timeout_ms from 1 to 86400000)";
  if (!body.is_object() || body.empty()) return error_response(400, shape);
  std::optional<bool> enabled;
  std::optional<std::uint64_t> timeout;
  for (const auto& [k, v] : body.items()) {
    if (k == "enabled" && v.is_boolean()) {
      enabled = v.get<bool>();
    } else if (k == "timeout_ms" && v.is_number_unsigned() && v.get<std::uint64_t>() >= 1 &&
               v.get<std::uint64_t>() <= 86'400'000) {
      timeout = v.get<std::uint64_t>();
    } else {
      return error_response(400, shape);
    }
  }
  return json_response(200, ask_json(pending_->set_ask(enabled, timeout)));
}

}  // namespace vibepit::control
