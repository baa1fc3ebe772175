// Tenants: names, who a client is, and which tenant an id stands for.
#include "vibepit/policy/tenant.hpp"

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::policy {
namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

}  // namespace

std::string tenant_name_problem(std::string_view name) {
  if (name.empty() || name.size() > 64) return "a tenant's name is 1 to 64 characters";
  if (!name_char(name.front()) || name.front() == '-' || name.front() == '_' || name.front() == '.')
    return "a tenant's name starts with a letter or a digit";
  for (char c : name) {
    if (!name_char(c)) return "a tenant's name has only letters, digits, '-', '_' and '.'";
  }
  return {};
}

std::string tenant_token_problem(std::string_view token) {
  if (token.size() < 16) return "a tenant's token has at least 16 characters";
  if (token.size() > 1024) return "a tenant's token has at most 1024 characters";
  for (char c : token) {
    if (c <= ' ' || c > '~') return "a tenant's token has only printable ASCII, without spaces";
  }
  return {};
}

TenantId find_tenant(const Snapshot& snap, std::string_view name) {
  if (!snap.tenant_index) return kNoTenant;
  // The index's keys are std::string: a lookup by view builds one, within the short-string
  // buffer for names of up to 15 characters.
  const auto it = snap.tenant_index->find(std::string(name));
  return it == snap.tenant_index->end() ? kNoTenant : it->second;
}

TenantId authenticate(const Snapshot& snap, std::string_view user, std::string_view token) {
  const TenantId id = find_tenant(snap, user);
  const Tenant* t = tenant_of(snap, id);
  if (t == nullptr || !t->token) return kNoTenant;
  return secret::equal_constant_time(token, t->token->reveal()) ? id : kNoTenant;
}

const Tenant* tenant_of(const Snapshot& snap, TenantId id) {
  if (!snap.tenants || id < 0 || static_cast<std::size_t>(id) >= snap.tenants->size())
    return nullptr;
  return &(*snap.tenants)[static_cast<std::size_t>(id)];
}

}  // namespace vibepit::policy
