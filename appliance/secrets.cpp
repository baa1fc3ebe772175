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

std::vector<secret::SharedSecret> read_tenant_tokens(const config::Config& cfg) {
  std::vector<secret::SharedSecret> out;
  out.reserve(cfg.tenants.size());
  for (const auto& t : cfg.tenants) {
    try {
      auto token = secret::read_file(t.token_file);
      if (auto why = policy::tenant_token_problem(token->reveal()); !why.empty())
        throw std::runtime_error("token-file " + t.token_file + ": " + why);
      out.push_back(token->fitted());
    } catch (const std::exception& e) {
      throw std::runtime_error("tenant " + t.name + ": " + e.what());
    }
  }
  return out;
}

void reread_secrets(const config::Config& cfg, control::RuleUpdater& rules) {
  reread_credentials(cfg, rules);
  if (cfg.tenants.empty()) return;
  try {
    const auto generation = rules.set_tenant_tokens(read_tenant_tokens(cfg));
    spdlog::info("{} tenants' tokens re-read, generation {}", cfg.tenants.size(), generation);
  } catch (const std::exception& e) {
    spdlog::error("tenants' tokens not re-read, those in force stay: {}", e.what());
  }
}

}  // namespace vibepit::appliance
