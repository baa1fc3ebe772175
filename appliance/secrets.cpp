#include "secrets.hpp"

#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "vibepit/secret/source.hpp"

namespace vibepit::appliance {
namespace {

// One config credential with its value read. Throws with the name and what is wrong.
policy::Credential read_credential(const config::CredentialConfig& c) {
  try {
    auto raw = c.from_file.empty() ? secret::take_env(c.from_env) : secret::read_file(c.from_file);
    return {c.spec, policy::header_value(c.spec, raw->reveal())};
  } catch (const std::exception& e) {
    throw std::runtime_error("credential " + c.spec.name + ": " + e.what());
  }
}

std::vector<std::string> token_paths(const config::Config& cfg) {
  std::vector<std::string> paths;
  for (const auto& t : cfg.tenants) paths.push_back(t.token_file);
  return paths;
}

bool same_tokens(const std::vector<policy::TenantTokens>& a,
                 const std::vector<policy::TenantTokens>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < a[i].size(); ++j) {
      const auto& x = a[i][j];
      const auto& y = b[i][j];
      if (!x != !y) return false;
      if (x && !secret::equal_constant_time(x->reveal(), y->reveal())) return false;
    }
  }
  return true;
}

}  // namespace

std::shared_ptr<const policy::Credentials> read_credentials(const config::Config& cfg) {
  if (cfg.credentials.empty()) return nullptr;
  auto out = std::make_shared<policy::Credentials>();
  for (const auto& c : cfg.credentials) out->push_back(read_credential(c));
  return out;
}

std::shared_ptr<const policy::Credentials> with_channel(
    std::shared_ptr<const policy::Credentials> config, std::vector<policy::Credential> channel) {
  if (channel.empty()) return config;
  auto out = config ? std::make_shared<policy::Credentials>(*config)
                    : std::make_shared<policy::Credentials>();
  for (auto& c : channel) {
    for (const auto& o : *out) {
      if (o.spec.name == c.spec.name || policy::same_header_same_host(o.spec, c.spec))
        throw std::runtime_error("credential " + c.spec.name + " from the start-up channel " +
                                 "clashes with credential " + o.spec.name + " of the config");
    }
    out->push_back(std::move(c));
  }
  return out;
}

std::vector<policy::TenantTokens> read_tenant_tokens(const config::Config& cfg) {
  std::vector<policy::TenantTokens> out;
  out.reserve(cfg.tenants.size());
  for (const auto& t : cfg.tenants) {
    try {
      const auto file = secret::read_file(t.token_file);
      try {
        out.push_back(policy::split_tenant_tokens(file->reveal()));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error("token-file " + t.token_file + ": " + e.what());
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("tenant " + t.name + ": " + e.what());
    }
  }
  return out;
}

void reread_credentials(const config::Config& cfg, control::RuleUpdater& rules) {
  std::vector<policy::Credential> fresh;
  try {
    for (const auto& c : cfg.credentials) {
      if (!c.from_file.empty()) fresh.push_back(read_credential(c));
    }
  } catch (const std::exception& e) {
    spdlog::error("credentials not re-read, those in force stay: {}", e.what());
    return;
  }
  for (auto& c : fresh) {
    const std::string name = c.spec.name;
    bool replaced = false;
    auto set = rules.set_credential(std::move(c), replaced);
    if (auto* why = std::get_if<std::string>(&set)) {
      spdlog::error("credential {} not re-read: {}", name, *why);
    } else {
      spdlog::info("credential {} re-read, generation {}", name, std::get<std::uint64_t>(set));
    }
  }
}

TenantTokenFiles::TenantTokenFiles(const config::Config& cfg,
                                   std::vector<policy::TenantTokens> in_force,
                                   control::RuleUpdater& rules)
    : cfg_(cfg),
      rules_(rules),
      last_(std::move(in_force)),
      watch_("token-file", token_paths(cfg), [this] { reload(); }) {}

void TenantTokenFiles::reload() {
  std::lock_guard lock(mu_);
  std::vector<policy::TenantTokens> read;
  try {
    read = read_tenant_tokens(cfg_);
  } catch (const std::exception& e) {
    // Once for each problem, not at every re-read that finds it again.
    if (e.what() == last_error_) return;
    last_error_ = e.what();
    spdlog::error("tenants' tokens not re-read, those in force stay: {}", last_error_);
    return;
  }
  last_error_.clear();
  if (same_tokens(read, last_)) return;
  last_ = read;
  const auto generation = rules_.set_tenant_tokens(std::move(read));
  spdlog::info("{} tenants' tokens re-read, generation {}", cfg_.tenants.size(), generation);
}

}  // namespace vibepit::appliance
