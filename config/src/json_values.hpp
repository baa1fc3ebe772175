#pragma once
// What the configuration's parsers share: reading JSON values, with errors that name the key.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vibepit/config/config.hpp"

namespace vibepit::config::detail {

std::string type_name(const nlohmann::json& v);
// A list of strings, or ConfigError naming `key`.
std::vector<std::string> string_list(const nlohmann::json& v, const std::string& key);

// Keys tenants and dns-tenants (tenants.cpp), into `cfg`; dns-tenants after tenants.
void parse_tenants(const nlohmann::json& v, Config& cfg);
void parse_dns_tenants(const nlohmann::json& v, Config& cfg);

}  // namespace vibepit::config::detail
