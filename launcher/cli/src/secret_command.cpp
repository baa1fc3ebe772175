#include "vibepit/launcher/cli/secret_command.hpp"

#include <ostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "client_call.hpp"
#include "vibepit/launcher/host/terminal_text.hpp"
#include "vibepit/launcher/session/secrets.hpp"

namespace vibepit::launcher {
namespace {

using json = nlohmann::json;

// Percent-encoding for a query value: everything but the unreserved characters.
std::string query_value(std::string_view v) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? terminal_safe(it->get<std::string>()) : "";
}

}  // namespace

int cmd_secret_add(const Common& c, const std::string& spec, std::ostream& out, std::ostream& err) {
  SessionSecret s;
  try {
    s = read_secret_option(spec);
  } catch (const std::invalid_argument& e) {
    err << "vibepit: " << e.what() << "\n";
    return kUsage;
  }
  const std::string target =
      "/v1/secrets/" + s.spec.name + "?host=" + query_value(s.spec.host.text) +
      "&header=" + query_value(s.spec.header) + "&format=" + query_value(s.spec.format);
  return with_client(c, err, [&](control::ControlClient& client) {
    const auto r = client.put(target, s.value->reveal());
    s.value.reset();
    if (r.status != 200 && r.status != 201) {
      err << "vibepit: the proxy refused: " << api_error(r) << "\n";
      return static_cast<int>(kRefused);
    }
    const auto j = json::parse(r.body);
    if (c.json) {
      out << j.dump() << "\n";
      return static_cast<int>(kOk);
    }
    out << "secret " << field(j, "name") << (r.status == 201 ? " set" : " replaced") << " for "
        << field(j, "host") << " (" << field(j, "header") << ": " << field(j, "format")
        << "), generation " << j.value("generation", 0) << "\n"
        << "  requests to it carry the value; in the sandbox, send any placeholder, such as "
        << placeholder(s.spec.name) << "\n";
    if (!j.value("locked", true))
      out << "  note: the proxy could not lock its memory (RLIMIT_MEMLOCK); it is still kept "
             "out of core dumps\n";
    return static_cast<int>(kOk);
  });
}

int cmd_secret_rm(const Common& c, const std::string& name, std::ostream& out, std::ostream& err) {
  if (!std::holds_alternative<policy::CredentialSpec>(
          policy::make_credential(name, "a.example:443", "", ""))) {
    err << "vibepit: \"" << terminal_safe(name) << "\" is not a secret's name\n";
    return kUsage;
  }
  return with_client(c, err, [&](control::ControlClient& client) {
    const auto r = client.remove("/v1/secrets/" + name);
    if (r.status != 200) {
      err << "vibepit: " << api_error(r) << "\n";
      return static_cast<int>(kRefused);
    }
    if (c.json) {
      out << r.body;
    } else {
      out << "secret " << terminal_safe(name) << " removed; requests no longer carry it\n";
    }
    return static_cast<int>(kOk);
  });
}

int cmd_secret_ls(const Common& c, std::ostream& out, std::ostream& err) {
  return with_client(c, err, [&](control::ControlClient& client) {
    const auto r = client.get("/v1/secrets");
    if (r.status != 200) {
      err << "vibepit: " << api_error(r) << "\n";
      return static_cast<int>(kRefused);
    }
    const auto j = json::parse(r.body);
    if (c.json) {
      out << j.dump() << "\n";
      return static_cast<int>(kOk);
    }
    const auto& list = j.at("secrets");
    if (list.empty()) out << "no secrets in session " << client.session().info.id << "\n";
    for (const auto& s : list) {
      out << field(s, "name") << "  " << field(s, "host") << "  " << field(s, "header") << ": "
          << field(s, "format") << (s.value("locked", false) ? "" : "  (memory not locked)")
          << "\n";
    }
    return static_cast<int>(kOk);
  });
}

}  // namespace vibepit::launcher
