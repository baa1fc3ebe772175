#include "vibepit/launcher/rules/session_rules.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/host/embedded_files.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/policy/rules.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kPresetPrefix = "presets/";
constexpr std::string_view kPresetSuffix = ".yaml";

// An entry's canonical text (policy grammar), or why it is invalid.
std::variant<std::string, policy::RuleError> parse_entry(bool http, const std::string& e) {
  if (http) {
    auto r = policy::parse_http_rule(e);
    if (auto* ok = std::get_if<policy::HttpRule>(&r)) return ok->text;
    return std::get<policy::RuleError>(r);
  }
  auto r = policy::parse_dns_rule(e);
  if (auto* ok = std::get_if<policy::DnsRule>(&r)) return ok->text;
  return std::get<policy::RuleError>(r);
}

// A credential's canonical text (NAME=HOST:PORT,header=H,format=F), or why it is invalid.
// Options beyond header and format (file=, stdin) are refused: the file names no source.
std::variant<std::string, policy::RuleError> parse_credential_entry(const std::string& e) {
  auto r = policy::parse_credential(e);
  if (auto* ok = std::get_if<policy::CredentialSpec>(&r)) return ok->text();
  return std::get<policy::RuleError>(r);
}

std::string canonical_credential(const std::string& e) {
  auto r = parse_credential_entry(e);
  auto* ok = std::get_if<std::string>(&r);
  return ok ? *ok : e;
}

// Canonical, or as written when invalid (so it still shows where it is listed).
std::string canonical_entry(bool http, const std::string& e) {
  auto r = parse_entry(http, e);
  auto* ok = std::get_if<std::string>(&r);
  return ok ? *ok : e;
}

void add_unique(std::vector<std::string>& to, const std::string& e) {
  if (std::find(to.begin(), to.end(), e) == to.end()) to.push_back(e);
}

std::vector<std::string> minus(const std::vector<std::string>& a, const std::vector<std::string>& b,
                               bool keep_common) {
  std::vector<std::string> out;
  for (const auto& e : a) {
    const bool in_b = std::find(b.begin(), b.end(), e) != b.end();
    if (in_b == keep_common) add_unique(out, e);
  }
  return out;
}

}  // namespace

bool empty(const NetworkFile& f) {
  return f.allow_http.empty() && f.allow_dns.empty() && f.presets.empty() && f.credentials.empty();
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& [path, text] : embedded_files()) {
    if (path.rfind(kPresetPrefix, 0) != 0 ||
        path.size() <= kPresetPrefix.size() + kPresetSuffix.size() ||
        path.compare(path.size() - kPresetSuffix.size(), kPresetSuffix.size(), kPresetSuffix) != 0)
      continue;
    out.push_back(path.substr(kPresetPrefix.size(),
                              path.size() - kPresetPrefix.size() - kPresetSuffix.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

NetworkFile load_preset(const std::string& name) {
  const auto& files = embedded_files();
  auto it = files.find(std::string(kPresetPrefix) + name + std::string(kPresetSuffix));
  if (it == files.end()) {
    std::string valid;
    for (const auto& n : preset_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw RulesError("unknown preset \"" + name + "\"; the presets are: " + valid);
  }
  auto f = parse_network_yaml(it->second, "preset " + name);
  if (!f.presets.empty()) throw RulesError("preset " + name + " names other presets");
  return f;
}

NetworkFile canonical(const NetworkFile& f) {
  NetworkFile out;
  for (const auto& e : f.allow_http) add_unique(out.allow_http, canonical_entry(true, e));
  for (const auto& e : f.allow_dns) add_unique(out.allow_dns, canonical_entry(false, e));
  for (const auto& p : f.presets) add_unique(out.presets, p);
  for (const auto& c : f.credentials) add_unique(out.credentials, canonical_credential(c));
  return out;
}

NetworkFile merge_rules(const std::vector<NamedSource>& sources) {
  NetworkFile out;
  std::vector<std::string> errors;
  std::vector<std::string> seen_presets;
  auto take = [&](const std::string& from, const NetworkFile& f) {
    for (bool http : {true, false}) {
      for (const auto& e : http ? f.allow_http : f.allow_dns) {
        auto r = parse_entry(http, e);
        if (auto* bad = std::get_if<policy::RuleError>(&r))
          errors.push_back(from + ": " + bad->message());
        else
          add_unique(http ? out.allow_http : out.allow_dns, std::get<std::string>(r));
      }
    }
  };
  for (const auto& src : sources) {
    for (const auto& p : src.rules.presets) {
      if (std::find(seen_presets.begin(), seen_presets.end(), p) != seen_presets.end()) continue;
      seen_presets.push_back(p);
      try {
        take("preset " + p, load_preset(p));
      } catch (const std::exception& e) {
        errors.push_back(src.name + ": " + e.what());
      }
    }
    take(src.name, src.rules);
    for (const auto& c : src.rules.credentials) {
      auto r = parse_credential_entry(c);
      if (auto* bad = std::get_if<policy::RuleError>(&r))
        errors.push_back(src.name + ": " + bad->message());
      else
        add_unique(out.credentials, std::get<std::string>(r));
    }
  }
  out.presets = seen_presets;
  if (!errors.empty()) {
    std::string msg;
    for (const auto& e : errors) msg += (msg.empty() ? "" : "\n") + e;
    throw RulesError(msg);
  }
  return out;
}

fs::path state_dir_for(const fs::path& sessions_root) {
  return (sessions_root.empty() ? control::default_sessions_root() : sessions_root).parent_path();
}

Approvals::Approvals(const fs::path& state_dir, Project project)
    : path_(state_dir / "approved" / (project.hash + ".json")), project_(std::move(project)) {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return;  // nothing approved yet
  std::stringstream s;
  s << in.rdbuf();
  auto j = nlohmann::json::parse(s.str(), nullptr, false);
  if (!j.is_object())
    throw RulesError(path_.string() + " is not valid JSON; remove it to approve again");
  auto list = [&](const char* key) {
    std::vector<std::string> out;
    if (j.contains(key) && j[key].is_array())
      for (const auto& e : j[key])
        if (e.is_string()) out.push_back(e.get<std::string>());
    return out;
  };
  approved_ =
      canonical({list("allow-http"), list("allow-dns"), list("presets"), list("credentials")});
}

NetworkFile Approvals::unapproved(const NetworkFile& file) const {
  auto f = canonical(file);
  return {minus(f.allow_http, approved_.allow_http, false),
          minus(f.allow_dns, approved_.allow_dns, false),
          minus(f.presets, approved_.presets, false),
          minus(f.credentials, approved_.credentials, false)};
}

NetworkFile Approvals::approved_part(const NetworkFile& file) const {
  auto f = canonical(file);
  return {minus(f.allow_http, approved_.allow_http, true),
          minus(f.allow_dns, approved_.allow_dns, true), minus(f.presets, approved_.presets, true),
          minus(f.credentials, approved_.credentials, true)};
}

void Approvals::approve(const NetworkFile& entries) {
  auto f = canonical(entries);
  for (const auto& e : f.allow_http) add_unique(approved_.allow_http, e);
  for (const auto& e : f.allow_dns) add_unique(approved_.allow_dns, e);
  for (const auto& e : f.presets) add_unique(approved_.presets, e);
  for (const auto& e : f.credentials) add_unique(approved_.credentials, e);
  fs::create_directories(path_.parent_path());
  fs::permissions(path_.parent_path(), fs::perms::owner_all);
  const nlohmann::json j = {{"project", project_.root.string()},
                            {"allow-http", approved_.allow_http},
                            {"allow-dns", approved_.allow_dns},
                            {"presets", approved_.presets},
                            {"credentials", approved_.credentials}};
  const std::string text = j.dump(2) + "\n";
  fs::path tmp = path_;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw RulesError("cannot write " + tmp.string());
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw RulesError("cannot write " + path_.string());
  }
}

}  // namespace vibepit::launcher
