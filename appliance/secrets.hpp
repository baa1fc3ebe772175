#pragma once
// The appliance's secrets, read from where the config says: credentials' values
// (docs/credentials.md) and tenants' tokens (docs/fleet.md). Errors name the credential or
// tenant and what is wrong, never a byte of a value.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "file_watch.hpp"
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

// Each tenant's tokens from its token-file (one, or two while it changes), by TenantId.
// Throws on the first file that cannot be read or is not one or two tokens, one a line
// (policy::split_tenant_tokens).
std::vector<policy::TenantTokens> read_tenant_tokens(const config::Config& cfg);

// SIGHUP: the from-file credentials again, all or none (a file being rewritten must not take
// one away); what cannot be read is logged, and what is in force stays.
void reread_credentials(const config::Config& cfg, control::RuleUpdater& rules);

// The tenants' token files, watched (FileWatch) and re-read on SIGHUP. When what they hold
// changed, every tenant's tokens are replaced at once, or, when one file cannot be read or
// holds no token, none are (a file being rewritten must not lock a tenant out): the error is
// logged once and the tokens in force stay. An unchanged read publishes nothing.
class TenantTokenFiles {
 public:
  // `in_force`: the tokens the start read. Starts watching.
  TenantTokenFiles(const config::Config& cfg, std::vector<policy::TenantTokens> in_force,
                   control::RuleUpdater& rules);
  TenantTokenFiles(const TenantTokenFiles&) = delete;
  TenantTokenFiles& operator=(const TenantTokenFiles&) = delete;

  void reload();  // read the files now (SIGHUP)

 private:
  const config::Config& cfg_;
  control::RuleUpdater& rules_;
  std::mutex mu_;  // one reload at a time: the watcher's or SIGHUP's
  std::vector<policy::TenantTokens> last_;
  std::string last_error_;
  FileWatch watch_;  // last: its thread stops before the members it reads go
};

}  // namespace vibepit::appliance
