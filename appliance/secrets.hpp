#pragma once
// The appliance's secrets, read from where the config says: credentials' values
// (docs/credentials.md) and tenants' tokens (docs/fleet.md). Errors name the credential or
// tenant and what is wrong, never a byte of a value.
#include <memory>
#include <vector>

#include "vibepit/config/config.hpp"
#include "vibepit/control/rule_updater.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::appliance {

// The config's credentials, read before any thread starts (take_env must be); null for none.
std::shared_ptr<const policy::Credentials> read_credentials(const config::Config& cfg);

// The config's credentials and the start-up channel's together; one name, or one header on
// one host, twice is an error.
std::shared_ptr<const policy::Credentials> with_channel(
    std::shared_ptr<const policy::Credentials> config, std::vector<policy::Credential> channel);

// Each tenant's token from its token-file, by TenantId. Throws on the first that cannot be
// read or is no token (policy::tenant_token_problem).
std::vector<secret::SharedSecret> read_tenant_tokens(const config::Config& cfg);

// SIGHUP: the from-file credentials and the tenants' tokens again, each set all or none (a
// file being rewritten must not take one away); what cannot be read is logged, and what is
// in force stays.
void reread_secrets(const config::Config& cfg, control::RuleUpdater& rules);

}  // namespace vibepit::appliance
