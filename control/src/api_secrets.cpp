// /v1/secrets: the credentials the proxy adds to requests for their host
// (docs/credentials.md). A value arrives as the raw body of a PUT and goes straight into
// secret memory; no answer, error or log line ever holds one.
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "api_responses.hpp"
#include "vibepit/control/api.hpp"
#include "vibepit/policy/credential.hpp"

namespace vibepit::control {
namespace {

using json = nlohmann::json;
constexpr std::string_view kPrefix = "/v1/secrets/";

json credential_json(const policy::Credential& c) {
  return {{"name", c.spec.name},
          {"host", c.spec.host.text},
          {"header", c.spec.header},
          {"format", c.spec.format},
          {"locked", c.value->locked()}};
}

}  // namespace

ApiResponse ControlApi::secrets(const ApiRequest& req) const {
  if (req.path == "/v1/secrets") {
    if (req.method != "GET") return method_not_allowed("GET");
    const auto snap = store_.current();
    json list = json::array();
    if (snap->credentials) {
      for (const auto& c : *snap->credentials) list.push_back(credential_json(c));
    }
    return json_response(200, {{"generation", snap->generation}, {"secrets", std::move(list)}});
  }
  const std::string_view name = std::string_view(req.path).substr(kPrefix.size());
  if (req.method == "PUT") return put_secret(name, req);
  if (req.method != "DELETE") return method_not_allowed("PUT, DELETE");
  const auto generation = rules_.remove_credential(name);
  if (!generation) {
    return error_response(404, "no credential is named \"" + std::string(name.substr(0, 64)) +
                                   "\" (GET /v1/secrets lists them)");
  }
  return json_response(200, {{"removed", std::string(name)}, {"generation", *generation}});
}

ApiResponse ControlApi::put_secret(std::string_view name, const ApiRequest& req) const {
  std::string host, header, format;
  for (const auto& [k, v] : req.query) {
    if (k == "host") {
      host = v;
    } else if (k == "header") {
      header = v;
    } else if (k == "format") {
      format = v;
    } else {
      return error_response(400, "unknown query parameter \"" + k.substr(0, 32) +
                                     "\" (host, header and format are known)");
    }
  }
  if (host.empty())
    return error_response(400, "missing query parameter host=HOST:PORT: where the secret goes");
  auto made = policy::make_credential(name, host, header, format);
  if (auto* e = std::get_if<policy::RuleError>(&made)) return error_response(400, e->message());
  policy::Credential c{std::move(std::get<policy::CredentialSpec>(made)), nullptr};
  try {
    c.value = policy::header_value(c.spec, req.body);
  } catch (const std::invalid_argument& e) {
    return error_response(400, "credential " + c.spec.name + ": " + e.what());
  }
  json out = credential_json(c);
  bool replaced = false;
  auto set = rules_.set_credential(std::move(c), replaced);
  if (auto* why = std::get_if<std::string>(&set)) return error_response(409, *why);
  out["generation"] = std::get<std::uint64_t>(set);
  out["replaced"] = replaced;
  return json_response(replaced ? 200 : 201, out);
}

}  // namespace vibepit::control
