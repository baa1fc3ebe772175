#pragma once
// The immutable rule snapshot shared by the DNS server and the proxy, and its store.
// Readers take no lock and do no contended read-modify-write: each thread caches the
// current snapshot and re-reads it only when the published generation moved.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "vibepit/policy/classify.hpp"
#include "vibepit/policy/cow.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/policy/matcher.hpp"
#include "vibepit/policy/rules.hpp"
#include "vibepit/policy/tenant.hpp"

namespace vibepit::policy {

// How the rules are applied. In audit mode a request that no allow rule matches goes ahead
// and is recorded as would_deny; everything no rule could ever allow (blocked addresses,
// invalid targets, refused query types) stays denied. See decide_http().
enum class Mode { enforce, audit };

std::string_view to_string(Mode m);
std::optional<Mode> parse_mode(std::string_view text);  // "enforce" or "audit"

// The textual rule set, as given in config or added at runtime, and the mode it runs in.
struct RuleSet {
  std::vector<std::string> allow_http;
  std::vector<std::string> allow_dns;
  std::vector<std::string> block_cidr;
  Mode mode = Mode::enforce;
  // Tenants (tenant.hpp), in the order that gives each its TenantId. Empty: no tenants, and
  // no client needs to say who it is.
  std::vector<TenantRuleSet> tenants{};
};

// The rules in force as canonical text, in insertion order, for display. The lists are
// shared with the snapshot's copies (cow.hpp), like the matchers.
struct RuleTexts {
  CowList<std::string> allow_http;
  CowList<std::string> allow_dns;
  std::vector<std::string> block_cidr;
  Mode mode = Mode::enforce;
};

// Copying a snapshot costs a fixed number of reference counts, whatever it holds: its
// matchers and lists share their parts with the copy until the copy changes one.
struct Snapshot {
  std::uint64_t generation = 0;
  HttpMatcher http;
  DnsMatcher dns;
  Classifier classifier;
  RuleTexts rules;
  // Credentials (credential.hpp) in the order they were added; null when there are none.
  // Their hosts are inspected, as a method/path rule's are.
  std::shared_ptr<const Credentials> credentials;
  // Tenants (tenant.hpp), indexed by TenantId; null when the configuration names none. Then
  // every proxy client must authenticate as one of them.
  std::shared_ptr<const Tenants> tenants;
  // Each tenant's name to its TenantId: the names are fixed for the process's life, so every
  // snapshot shares the one index its first one built.
  std::shared_ptr<const std::unordered_map<std::string, TenantId>> tenant_index;
  // Every tenant's allow-dns rules together: what the DNS server answers for a client it
  // cannot tie to one tenant.
  DnsMatcher tenant_dns;
};

// Compile and validate a whole rule set. Any invalid entry fails the whole set.
std::variant<std::shared_ptr<const Snapshot>, std::vector<RuleError>> compile(
    const RuleSet& rules, std::uint64_t generation);
// The same, but the snapshot stays mutable so that SnapshotStore::publish() can stamp its
// generation: `store.publish(std::get<0>(compile_mutable(rules)))`.
std::variant<std::shared_ptr<Snapshot>, std::vector<RuleError>> compile_mutable(
    const RuleSet& rules, std::uint64_t generation = 0);

// Rules already parsed (and so already valid), to be added to a snapshot in force.
struct ParsedRules {
  std::vector<HttpRule> allow_http;
  std::vector<DnsRule> allow_dns;
};
// A mutable copy of `base` with `added` appended, for publish(): to the top-level rules, or
// to tenant `tenant`'s (which `base` must have). Nothing is parsed again; a rule equal to one
// present is skipped. The cost grows with the rules added (and, for a tenant, the number of
// tenants), not with the rules in `base`: the copy shares base's parts and copies only those
// it changes.
std::shared_ptr<Snapshot> with_added(const Snapshot& base, ParsedRules added,
                                     TenantId tenant = kNoTenant);
// Whether `rule` is in force for `tenant` (kNoTenant: at the top level).
bool has_rule(const Snapshot& snap, const HttpRule& rule, TenantId tenant = kNoTenant);
bool has_rule(const Snapshot& snap, const DnsRule& rule, TenantId tenant = kNoTenant);

// A mutable copy of `base` whose tenants have these tokens, by TenantId (an entry for each of
// base's tenants; one of nulls leaves that tenant without a token). The tokens replaced are
// wiped once no snapshot holds them.
std::shared_ptr<Snapshot> with_tenant_tokens(const Snapshot& base,
                                             std::vector<TenantTokens> tokens);

// A mutable copy of `base` in which `c` takes the place of the credential of the same name,
// or follows the others. The replaced one's value is wiped once no snapshot holds it.
std::shared_ptr<Snapshot> with_credential(const Snapshot& base, Credential c);
// A mutable copy of `base` without credential `name`; null when it has none of that name.
std::shared_ptr<Snapshot> without_credential(const Snapshot& base, std::string_view name);
// The credential other than one named spec.name that sets the same header on the same
// host text, or null: two of them would leave the header to whichever came first.
const Credential* credential_conflict(const Snapshot& snap, const CredentialSpec& spec);
// The credentials for a request to host:port, the first for each header name, into `out`
// (cleared first). `host` as a request names it: normalised here.
void credentials_for(std::string_view host, std::uint16_t port, const Snapshot& snap,
                     std::vector<const Credential*>& out);

class SnapshotStore {
 public:
  // A null `initial` stands for an empty snapshot (default deny) at generation 0.
  explicit SnapshotStore(std::shared_ptr<const Snapshot> initial);
  SnapshotStore(const SnapshotStore&) = delete;
  SnapshotStore& operator=(const SnapshotStore&) = delete;

  // Publish atomically; the store sets the generation to the previous one + 1.
  // Writers are serialised among themselves; readers are never blocked.
  // `next` must not be shared with anyone yet; null throws std::invalid_argument.
  std::uint64_t publish(std::shared_ptr<Snapshot> next);

  // The current snapshot for this thread. The returned pointer keeps the snapshot alive;
  // its reference count is per thread, so copying it is an uncontended operation.
  std::shared_ptr<const Snapshot> current() const;

  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex write_mu_;  // writers and the slow refresh path only
  std::shared_ptr<const Snapshot> latest_;
  std::atomic<std::uint64_t> generation_{0};
  std::uint64_t id_;  // distinguishes stores in the per-thread cache; never reused
  // Expires with the store, so that per-thread caches can drop entries of dead stores.
  std::shared_ptr<const char> alive_;
};

}  // namespace vibepit::policy
