// Tenants: names, who a client is, and which tenant an id stands for.
#include "vibepit/policy/tenant.hpp"

#include <stdexcept>
#include <string>

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

TenantTokens split_tenant_tokens(std::string_view text) {
  TenantTokens out;
  std::size_t n = 0;
  for (std::size_t line = 1;; ++line) {
    const auto end = text.find('\n');
    auto token = text.substr(0, end);
    if (!token.empty() && token.back() == '\r') token.remove_suffix(1);
    if (n == out.size())
      throw std::invalid_argument("more than " + std::to_string(out.size()) +
                                  " lines: a tenant has one token, or two while it changes");
    if (auto why = tenant_token_problem(token); !why.empty())
      throw std::invalid_argument("line " + std::to_string(line) + ": " + why);
    auto bytes = std::make_shared<secret::SecretBytes>(token.size());
    bytes->append(token);
    out[n++] = std::move(bytes);
    if (end == std::string_view::npos) return out;
    text.remove_prefix(end + 1);
  }
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
  if (t == nullptr) return kNoTenant;
  // Every token is compared, the first matching or not: the time tells nothing of which.
  bool match = false;
  for (const auto& mine : t->tokens) {
    if (mine) match |= secret::equal_constant_time(token, mine->reveal());
  }
  return match ? id : kNoTenant;
}

const Tenant* tenant_of(const Snapshot& snap, TenantId id) {
  if (!snap.tenants || id < 0 || static_cast<std::size_t>(id) >= snap.tenants->size())
    return nullptr;
  return &(*snap.tenants)[static_cast<std::size_t>(id)];
}

}  // namespace vibepit::policy
