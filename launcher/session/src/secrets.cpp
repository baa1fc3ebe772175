#include "vibepit/launcher/session/secrets.hpp"

#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <utility>

#include <openssl/crypto.h>
#include <nlohmann/json.hpp>

#include "vibepit/control/startup_channel.hpp"
#include "vibepit/secret/source.hpp"

namespace vibepit::launcher {
namespace {

// Variables the launcher sets in the sandbox: a secret's placeholder may not replace one.
constexpr std::array<std::string_view, 19> kReservedEnv = {"HOME",
                                                           "PATH",
                                                           "HTTP_PROXY",
                                                           "HTTPS_PROXY",
                                                           "http_proxy",
                                                           "https_proxy",
                                                           "NO_PROXY",
                                                           "no_proxy",
                                                           "npm_config_proxy",
                                                           "npm_config_https_proxy",
                                                           "NODE_USE_ENV_PROXY",
                                                           "GLOBAL_AGENT_HTTP_PROXY",
                                                           "JAVA_TOOL_OPTIONS",
                                                           "SSL_CERT_FILE",
                                                           "CURL_CA_BUNDLE",
                                                           "REQUESTS_CA_BUNDLE",
                                                           "NODE_EXTRA_CA_CERTS",
                                                           "GIT_SSL_CAINFO",
                                                           "PIP_CERT"};

// Restores the terminal's echo however the read ends.
struct NoEcho {
  int fd;
  termios saved{};
  bool on = false;
  explicit NoEcho(int f) : fd(f) {
    if (::tcgetattr(fd, &saved) != 0) return;
    termios t = saved;
    t.c_lflag &= static_cast<tcflag_t>(~ECHO);
    on = ::tcsetattr(fd, TCSANOW, &t) == 0;
  }
  ~NoEcho() {
    if (on) ::tcsetattr(fd, TCSANOW, &saved);
  }
};

// One line of standard input into secret memory, byte by byte: nothing after the line is
// taken from whoever reads stdin next (the sandbox).
std::shared_ptr<secret::SecretBytes> read_stdin_line(const std::string& name) {
  const bool terminal = ::isatty(STDIN_FILENO) != 0;
  std::optional<NoEcho> quiet;
  if (terminal) {
    std::cerr << "secret " << name << " (not shown): " << std::flush;
    quiet.emplace(STDIN_FILENO);
  }
  secret::SecretBytes line(secret::SecretBytes::kMaxValue + 1);
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') break;
    if (line.size() == line.capacity())
      throw std::invalid_argument("--secret " + name +
                                  ": the line on standard input is longer than 8192 bytes");
    line.append({&c, 1});
    secret::wipe(&c, 1);
  }
  if (terminal) std::cerr << "\n";
  if (line.reveal().ends_with('\r')) line.resize(line.size() - 1);
  return line.fitted();
}

}  // namespace

std::string placeholder(std::string_view name) {
  return "vibepit-secret-" + std::string(name);
}

SessionSecret read_secret_option(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> extra;
  auto parsed = policy::parse_credential(text, &extra);
  if (auto* e = std::get_if<policy::RuleError>(&parsed))
    throw std::invalid_argument("--secret: " + e->message());
  SessionSecret out{std::move(std::get<policy::CredentialSpec>(parsed)), nullptr};
  const std::string& name = out.spec.name;
  for (auto r : kReservedEnv) {
    if (name == r)
      throw std::invalid_argument("--secret " + name + ": the sandbox's " + name +
                                  " is vibepit's own; give the secret another name");
  }
  if (name.starts_with("VIBEPIT_"))
    throw std::invalid_argument("--secret " + name + ": VIBEPIT_ names are vibepit's own");
  std::string file;
  bool from_stdin = false;
  for (const auto& [k, v] : extra) {
    if (k == "file" && !v.empty() && file.empty() && !from_stdin) {
      file = v;
    } else if (k == "stdin" && v.empty() && file.empty() && !from_stdin) {
      from_stdin = true;
    } else {
      throw std::invalid_argument("--secret " + name + ": option \"" + k.substr(0, 32) +
                                  "\" is not one of header=H, format=F, file=PATH, stdin (one "
                                  "source at most)");
    }
  }
  try {
    out.value = from_stdin      ? read_stdin_line(name)
                : !file.empty() ? secret::read_file(file)
                                : secret::take_env(name);
  } catch (const secret::SourceError& e) {
    throw std::invalid_argument("--secret " + name + ": " + e.what() +
                                (file.empty() && !from_stdin
                                     ? " (the value comes from the environment variable of the "
                                       "secret's name, or from file=PATH or stdin)"
                                     : ""));
  }
  if (auto problem = policy::secret_problem(out.value->reveal()); !problem.empty())
    throw std::invalid_argument("--secret " + name + ": " + problem);
  return out;
}

std::vector<SessionSecret> read_secret_options(const std::vector<std::string>& texts) {
  std::vector<SessionSecret> out;
  bool stdin_taken = false;
  for (const auto& t : texts) {
    auto s = read_secret_option(t);
    const bool from_stdin = t.ends_with(",stdin") || t.find(",stdin,") != std::string::npos;
    if (from_stdin && std::exchange(stdin_taken, true))
      throw std::invalid_argument("--secret: only one secret can come from standard input");
    for (const auto& o : out) {
      if (o.spec.name == s.spec.name)
        throw std::invalid_argument("--secret " + s.spec.name + " is given twice");
      if (policy::same_header_same_host(o.spec, s.spec))
        throw std::invalid_argument("--secret " + s.spec.name + " and " + o.spec.name +
                                    " both set " + s.spec.header + " on " + s.spec.host.text);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<SessionSecret> session_secrets(const std::vector<std::string>& flags,
                                           const std::vector<std::string>& from_file,
                                           std::ostream& err) {
  std::vector<std::string> texts = flags;
  for (const auto& entry : from_file) {
    const std::string name = entry.substr(0, entry.find('='));
    const bool flagged = std::any_of(flags.begin(), flags.end(), [&](const std::string& f) {
      return f.compare(0, name.size() + 1, name + "=") == 0;
    });
    if (flagged) continue;
    if (std::getenv(name.c_str()) == nullptr) {
      err << "vibepit: credential " << name << " (.vibepit/network.yaml): the environment "
          << "variable " << name << " is not set; the session starts without it\n";
      continue;
    }
    texts.push_back(entry);
  }
  return read_secret_options(texts);
}

std::shared_ptr<secret::SecretBytes> startup_channel(const control::PeerCredentials& server,
                                                     const std::vector<SessionSecret>& secrets) {
  std::string head =
      nlohmann::json{
          {"ca", server.ca_cert_pem}, {"cert", server.own.cert_pem}, {"key", server.own.key_pem}}
          .dump();
  std::size_t size = head.size() + 1;
  for (const auto& s : secrets) size += control::secret_record_size(s.spec, s.value->size());
  auto out = std::make_shared<secret::SecretBytes>(size);
  out->append(head);
  out->append("\n");
  OPENSSL_cleanse(head.data(), head.size());
  for (const auto& s : secrets) control::append_secret_record(*out, s.spec, s.value->reveal());
  return out;
}

}  // namespace vibepit::launcher
