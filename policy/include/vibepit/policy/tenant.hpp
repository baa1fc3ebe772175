#pragma once
// Tenants of a shared gateway (docs/fleet.md): each is a name, a token its clients prove with
// Proxy-Authorization, and rules of its own. A tenant's request is decided by the top-level
// rules plus its own; another tenant's rules never apply to it. The DNS server, which cannot
// see a tenant, answers for the top-level names and, unless a source range maps the client
// to one tenant, for every tenant's (the union).
//
// A tenant is known by its place in the configuration's list (TenantId): the list is fixed
// for the process's life, so a connection authenticated against one snapshot is the same
// tenant in the next, while the tokens and rules in each snapshot may change.
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/cow.hpp"
#include "vibepit/policy/matcher.hpp"
#include "vibepit/policy/rules.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::policy {

struct Snapshot;

using TenantId = int;
inline constexpr TenantId kNoTenant = -1;     // the top-level rules only
inline constexpr TenantId kEveryTenant = -2;  // DNS: the top-level rules and every tenant's

// A tenant's tokens: the one in use and, while its clients move to a new one, that one too
// (docs/fleet.md, "Rotating a tenant's token"). Either proves the tenant; a null one is none.
inline constexpr std::size_t kMaxTenantTokens = 2;
using TenantTokens = std::array<secret::SharedSecret, kMaxTenantTokens>;

// A tenant's rules as text, as a configuration or rules file gives them.
struct TenantRuleSet {
  std::string name;
  std::vector<std::string> allow_http;
  std::vector<std::string> allow_dns;
};

struct Tenant {
  std::string name;
  // The tokens its clients present, in secret memory. None: none was read, and no client can
  // be this tenant.
  TenantTokens tokens;
  HttpMatcher http;
  DnsMatcher dns;
  CowList<std::string> allow_http;  // canonical texts, in insertion order
  CowList<std::string> allow_dns;
};
using Tenants = std::vector<Tenant>;

// Why `name` cannot name a tenant, or empty: 1 to 64 of letters, digits, '-', '_' and '.',
// starting with a letter or digit (so never ':', which ends a Basic user name).
std::string tenant_name_problem(std::string_view name);

// Why `token` cannot be a tenant's token, or empty: 16 to 1024 printable ASCII characters
// other than space (it goes in a proxy URL; fewer than 16 could be guessed). The answer
// never quotes the token.
std::string tenant_token_problem(std::string_view token);

// The tokens in a token file's text: one per line ("\r\n" ends one too), at most
// kMaxTenantTokens, each one tenant_token_problem accepts, each copied into secret memory of
// its own. Throws std::invalid_argument saying which line is wrong and why, never quoting it.
TenantTokens split_tenant_tokens(std::string_view text);

// The tenant called `name`, or kNoTenant.
TenantId find_tenant(const Snapshot& snap, std::string_view name);

// The tenant whose name is `user` and one of whose tokens is `token`, or kNoTenant. The token
// is compared with each of the tenant's, every one of them, in constant time
// (secret::equal_constant_time); a tenant without a token matches nothing.
TenantId authenticate(const Snapshot& snap, std::string_view user, std::string_view token);

// The tenant `id` of `snap`, or null for kNoTenant, kEveryTenant or an id it has not.
const Tenant* tenant_of(const Snapshot& snap, TenantId id);

}  // namespace vibepit::policy
