#pragma once
// How the runtime commands call the selected session's control API (commands.cpp,
// secret_command.cpp): the usual failures become a message and an exit code.
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "vibepit/control/client.hpp"
#include "vibepit/launcher/cli/commands.hpp"

namespace vibepit::launcher {

// The error message of an API answer, or the body itself.
inline std::string api_error(const control::HttpResult& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return j["error"].get<std::string>();
  }
  return "HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300);
}

// Run `fn` with the selected session's client, turning the usual failures into messages
// and exit codes.
template <typename Fn>
int with_client(const Common& c, std::ostream& err, Fn fn) {
  try {
    control::ControlClient client(select_session(c));
    return fn(client);
  } catch (const SelectError& e) {
    err << "vibepit: " << e.message << "\n";
    return e.code;
  } catch (const control::ConnectError& e) {
    err << "vibepit: " << e.what() << "\nIs the session still running? `vibepit status` lists "
        << "the sessions that answer.\n";
    return kNoSession;
  } catch (const std::runtime_error& e) {
    err << "vibepit: " << e.what() << "\n";
    return kLocalError;
  }
}

}  // namespace vibepit::launcher
