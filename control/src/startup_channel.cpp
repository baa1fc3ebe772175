#include "vibepit/control/startup_channel.hpp"

#include <unistd.h>

#include <charconv>
#include <stdexcept>

#include <openssl/crypto.h>
#include <nlohmann/json.hpp>

#include "vibepit/secret/source.hpp"

namespace vibepit::control {
namespace {

// Room for the server's credentials and a few dozen credentials of the largest size.
constexpr std::size_t kMaxChannel = 512 * 1024;
constexpr std::string_view kSecret = "secret ";

void wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

PeerCredentials parse_server(std::string_view line) {
  PeerCredentials out;
  try {
    auto j = nlohmann::json::parse(line);
    out.ca_cert_pem = j.at("ca").get<std::string>();
    out.own.cert_pem = j.at("cert").get<std::string>();
    out.own.key_pem = j.at("key").get<std::string>();
    if (j.contains("key")) wipe(j["key"].get_ref<std::string&>());
  } catch (const nlohmann::json::exception& e) {
    wipe(out.own.key_pem);
    throw std::runtime_error(std::string("the start-up channel: expected ") +
                             "{\"ca\", \"cert\", \"key\"} as JSON on its first line: " + e.what());
  }
  return out;
}

std::runtime_error bad_record(std::size_t n, const std::string& what) {
  return std::runtime_error("the start-up channel: credential record " + std::to_string(n) + ": " +
                            what);
}

}  // namespace

std::size_t secret_record_size(const policy::CredentialSpec& spec, std::size_t value_size) {
  return kSecret.size() + spec.text().size() + 1 + std::to_string(value_size).size() + 1 +
         value_size + 1;
}

void append_secret_record(secret::SecretBytes& out, const policy::CredentialSpec& spec,
                          std::string_view value) {
  out.append(kSecret);
  out.append(spec.text());
  out.append(" ");
  out.append(std::to_string(value.size()));
  out.append("\n");
  out.append(value);
  out.append("\n");
}

StartupChannel parse_startup_channel(std::string_view bytes) {
  const auto nl = bytes.find('\n');
  StartupChannel out;
  out.server = parse_server(bytes.substr(0, nl));
  std::string_view rest = nl == std::string_view::npos ? std::string_view{} : bytes.substr(nl + 1);
  for (std::size_t n = 1; !rest.empty(); ++n) {
    const auto end = rest.find('\n');
    if (end == std::string_view::npos || !rest.starts_with(kSecret))
      throw bad_record(n, "expected \"secret SPEC LENGTH\" and a newline");
    const auto line = rest.substr(kSecret.size(), end - kSecret.size());
    const auto sp = line.rfind(' ');
    if (sp == std::string_view::npos) throw bad_record(n, "no LENGTH after the spec");
    std::size_t len = 0;
    const auto digits = line.substr(sp + 1);
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), len);
    if (ec != std::errc{} || p != digits.data() + digits.size() || digits.empty())
      throw bad_record(n, "LENGTH is not a number");
    rest = rest.substr(end + 1);
    if (len > secret::SecretBytes::kMaxValue || rest.size() < len + 1 || rest[len] != '\n')
      throw bad_record(n, "the value is not LENGTH bytes and a newline");
    auto spec = policy::parse_credential(line.substr(0, sp));
    if (auto* e = std::get_if<policy::RuleError>(&spec)) throw bad_record(n, e->message());
    policy::Credential c{std::move(std::get<policy::CredentialSpec>(spec)), nullptr};
    try {
      c.value = policy::header_value(c.spec, rest.substr(0, len));
    } catch (const std::invalid_argument& e) {
      throw bad_record(n, c.spec.name + ": " + e.what());
    }
    for (const auto& o : out.credentials) {
      if (o.spec.name == c.spec.name) throw bad_record(n, "a second credential " + c.spec.name);
    }
    out.credentials.push_back(std::move(c));
    rest = rest.substr(len + 1);
  }
  return out;
}

StartupChannel read_startup_channel(int fd) {
  std::shared_ptr<secret::SecretBytes> bytes;
  try {
    bytes = secret::read_all(fd, kMaxChannel);
  } catch (const secret::SourceError& e) {
    ::close(fd);
    throw std::runtime_error(e.what());
  }
  ::close(fd);
  return parse_startup_channel(bytes->reveal());
}

}  // namespace vibepit::control
