#pragma once
// Runtime rule changes: validate a whole batch, then publish one new snapshot that the DNS
// server and the proxy both read. Writers are serialised here; readers never wait.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "vibepit/config/rules_file.hpp"
#include "vibepit/policy/rules.hpp"
#include "vibepit/policy/snapshot.hpp"

namespace vibepit::control {

enum class RuleList { allow_http, allow_dns };
const char* to_string(RuleList list);  // "allow-http", "allow-dns"

struct AddResult {
  std::vector<std::string> added;     // canonical entries new in this generation
  std::vector<std::string> existing;  // canonical entries that were already present
  std::uint64_t generation = 0;       // the generation that holds every entry
};

class RuleUpdater {
 public:
  explicit RuleUpdater(policy::SnapshotStore& store) : store_(store) {}

  // Called after each snapshot this publishes (ask mode wakes its held requests). Set before
  // the updater is used.
  void on_publish(std::function<void()> f) { on_publish_ = std::move(f); }

  // All or nothing: every entry is validated first, and any error returns the errors with
  // nothing applied. Entries already present (or repeated in the batch) are `existing`;
  // when nothing is new, no snapshot is published. The rules are the top level's, or tenant
  // `tenant`'s (which the snapshot must have: else std::invalid_argument).
  std::variant<AddResult, std::vector<policy::RuleError>> add(
      RuleList list, const std::vector<std::string>& entries,
      policy::TenantId tenant = policy::kNoTenant);

  // Publish the same rules in `mode`. Returns the generation in force afterwards; when the
  // mode is already `mode`, nothing is published and `changed` is false.
  std::uint64_t set_mode(policy::Mode mode, bool& changed);

  // Add a credential, or replace the one of the same name (`replaced` says which). The
  // generation that holds it, or why not (another credential sets the same header on the
  // same host).
  std::variant<std::uint64_t, std::string> set_credential(policy::Credential c, bool& replaced);
  // Remove credential `name`: the generation without it, or nullopt when there is none.
  std::optional<std::uint64_t> remove_credential(std::string_view name);

  // Give the tenants these tokens, by TenantId (policy::with_tenant_tokens); the generation
  // that holds them.
  std::uint64_t set_tenant_tokens(std::vector<policy::TenantTokens> tokens);

  // The watched rules file (docs/fleet.md). The configuration's rules are the base it adds
  // to: set them once, before the first apply_rules_file.
  void set_base(policy::RuleSet base);
  // The rules in force become the base, plus `file`, plus every rule add() put in since the
  // start; credentials, tokens and mode stay as they are. All or nothing: an invalid entry,
  // or a tenant the base has not, publishes nothing and returns why (the first problem, and
  // how many more). Counted for /metrics.
  std::variant<std::uint64_t, std::string> apply_rules_file(const config::RulesFile& file);
  struct FileCounts {
    std::uint64_t applied = 0;
    std::uint64_t invalid = 0;
  };
  FileCounts file_counts() const {
    return {file_applied_.load(std::memory_order_relaxed),
            file_invalid_.load(std::memory_order_relaxed)};
  }
  // Count a rules file that could not even be read or parsed (the watcher's side).
  void count_invalid_file() { file_invalid_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::uint64_t publish(std::shared_ptr<policy::Snapshot> next);

  // A rule add() published, kept so that a rules file's rebuild keeps it.
  struct Added {
    RuleList list;
    policy::TenantId tenant;
    std::string text;
  };

  std::mutex mu_;  // one writer at a time, so no addition is lost between read and publish
  policy::RuleSet base_;
  std::vector<Added> added_;
  std::atomic<std::uint64_t> file_applied_{0};
  std::atomic<std::uint64_t> file_invalid_{0};
  policy::SnapshotStore& store_;
  std::function<void()> on_publish_;
};

}  // namespace vibepit::control
