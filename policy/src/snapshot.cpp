// Snapshot compilation and the RCU-style store.
//
// Why the per-thread cache: the obvious lock-free read, std::atomic_load on a shared_ptr
// (or std::atomic<std::shared_ptr>), increments one reference count that every reader on
// every core shares. Under load that single cache line bounces between cores on each
// request. Instead each thread keeps its own holder object that owns a reference to the
// published snapshot, and current() returns an aliasing shared_ptr that counts references
// on the holder's control block. That count is only ever touched by this thread (unless
// the caller hands the pointer elsewhere), so the hot path is one acquire load of the
// generation plus an uncontended increment. Only when the generation moved does the
// thread take write_mu_ to copy latest_, which happens once per thread per publish.
#include "vibepit/policy/snapshot.hpp"

#include "vibepit/policy/name.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace vibepit::policy {
namespace {

std::atomic<std::uint64_t> g_next_store_id{1};

// Owns one reference to a published snapshot on behalf of one thread.
struct Holder {
  std::shared_ptr<const Snapshot> snap;
};

struct CacheEntry {
  std::uint64_t store_id;    // unique per store, never an address that could be reused
  std::uint64_t generation;  // the generation `holder` was taken at
  std::weak_ptr<const char> alive;
  std::shared_ptr<const Holder> holder;
};

// Stores a thread reads from. Entries of destroyed stores are swept on the next miss,
// and the list is capped, so a thread that outlives many stores holds little.
thread_local std::vector<CacheEntry> t_cache;
constexpr std::size_t kMaxCacheEntries = 16;

std::shared_ptr<const Snapshot> alias(const std::shared_ptr<const Holder>& holder) {
  return std::shared_ptr<const Snapshot>(holder, holder->snap.get());
}

// Adds a parsed rule to its matcher and, unless an equal one was there, its canonical text
// to the list shown to users.
template <class Matcher, class Rule>
void add_rule(Matcher& matcher, CowList<std::string>& texts, Rule rule) {
  std::string text = rule.text;
  if (matcher.add(std::move(rule))) texts.push_back(std::move(text));
}

// Parses every entry of one list, collecting every error, then adds the rules to its
// matcher, which makes room for all of them first, and to `also` when it is given.
template <class Rule, class Parse, class Matcher>
void compile_list(const std::vector<std::string>& entries, Parse parse, Matcher& matcher,
                  CowList<std::string>& texts, std::vector<RuleError>& errors,
                  Matcher* also = nullptr) {
  std::vector<Rule> rules;
  rules.reserve(entries.size());
  for (const auto& entry : entries) {
    auto parsed = parse(entry);
    if (auto* err = std::get_if<RuleError>(&parsed)) {
      errors.push_back(std::move(*err));
    } else {
      rules.push_back(std::move(std::get<Rule>(parsed)));
    }
  }
  if (!errors.empty()) return;  // nothing will be published
  matcher.reserve_for(rules);
  for (auto& rule : rules) {
    if (also != nullptr) also->add(rule);
    add_rule(matcher, texts, std::move(rule));
  }
}

// Each tenant's rules into its own matchers, and its allow-dns into the union the DNS server
// answers from. An error's list names the tenant: `tenant NAME allow-http`.
void compile_tenants(const std::vector<TenantRuleSet>& sets, Snapshot& snap,
                     std::vector<RuleError>& errors) {
  if (sets.empty()) return;
  auto tenants = std::make_shared<Tenants>();
  tenants->reserve(sets.size());
  for (const auto& set : sets) {
    if (auto why = tenant_name_problem(set.name); !why.empty()) {
      errors.push_back(RuleError{"tenants", set.name, std::move(why)});
      continue;
    }
    const bool taken = std::any_of(tenants->begin(), tenants->end(),
                                   [&](const Tenant& t) { return t.name == set.name; });
    if (taken) {
      errors.push_back(RuleError{"tenants", set.name, "two tenants have this name"});
      continue;
    }
    Tenant& t = tenants->emplace_back();
    t.name = set.name;
    const std::size_t before = errors.size();
    compile_list<HttpRule>(set.allow_http, parse_http_rule, t.http, t.allow_http, errors);
    compile_list<DnsRule>(set.allow_dns, parse_dns_rule, t.dns, t.allow_dns, errors,
                          &snap.tenant_dns);
    for (std::size_t i = before; i < errors.size(); ++i)
      errors[i].list = "tenant " + set.name + " " + errors[i].list;
  }
  auto index = std::make_shared<std::unordered_map<std::string, TenantId>>();
  for (std::size_t i = 0; i < tenants->size(); ++i)
    index->emplace((*tenants)[i].name, static_cast<TenantId>(i));
  snap.tenant_index = std::move(index);
  snap.tenants = std::move(tenants);
}

// Whether the top level's matcher (kNoTenant) or the tenant's own holds a rule equal to `rule`.
template <class Rule, class Matcher>
bool contains(const Snapshot& snap, const Rule& rule, TenantId tenant, Matcher Snapshot::*top,
              Matcher Tenant::*own) {
  if (tenant == kNoTenant) return (snap.*top).contains(rule);
  const Tenant* t = tenant_of(snap, tenant);
  return t != nullptr && (t->*own).contains(rule);
}

}  // namespace

std::string_view to_string(Mode m) {
  return m == Mode::audit ? "audit" : "enforce";
}

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "enforce") return Mode::enforce;
  if (text == "audit") return Mode::audit;
  return std::nullopt;
}

std::variant<std::shared_ptr<Snapshot>, std::vector<RuleError>> compile_mutable(
    const RuleSet& rules, std::uint64_t generation) {
  auto snap = std::make_shared<Snapshot>();
  snap->generation = generation;
  snap->rules.mode = rules.mode;
  std::vector<RuleError> errors;
  compile_list<HttpRule>(rules.allow_http, parse_http_rule, snap->http, snap->rules.allow_http,
                         errors);
  compile_list<DnsRule>(rules.allow_dns, parse_dns_rule, snap->dns, snap->rules.allow_dns, errors);
  std::vector<Cidr> blocked;
  std::unordered_set<std::string> seen;
  for (const auto& entry : rules.block_cidr) {
    auto parsed = parse_block_cidr(entry);
    if (auto* err = std::get_if<RuleError>(&parsed)) {
      errors.push_back(std::move(*err));
      continue;
    }
    const Cidr& cidr = std::get<Cidr>(parsed);
    std::string text = cidr.to_string();
    if (seen.insert(text).second) {
      snap->rules.block_cidr.push_back(std::move(text));
      blocked.push_back(cidr);
    }
  }
  compile_tenants(rules.tenants, *snap, errors);
  if (!errors.empty()) return errors;
  snap->classifier = Classifier(std::move(blocked));
  return snap;
}

std::variant<std::shared_ptr<const Snapshot>, std::vector<RuleError>> compile(
    const RuleSet& rules, std::uint64_t generation) {
  auto result = compile_mutable(rules, generation);
  if (auto* errors = std::get_if<std::vector<RuleError>>(&result)) return std::move(*errors);
  return std::shared_ptr<const Snapshot>(std::get<std::shared_ptr<Snapshot>>(std::move(result)));
}

std::shared_ptr<Snapshot> with_added(const Snapshot& base, ParsedRules added, TenantId tenant) {
  auto snap = std::make_shared<Snapshot>(base);
  if (tenant == kNoTenant) {
    for (auto& r : added.allow_http) add_rule(snap->http, snap->rules.allow_http, std::move(r));
    for (auto& r : added.allow_dns) add_rule(snap->dns, snap->rules.allow_dns, std::move(r));
    return snap;
  }
  if (tenant_of(base, tenant) == nullptr)
    throw std::invalid_argument("with_added: no tenant " + std::to_string(tenant));
  // The list is copied (its tenants share their matchers' parts), and one tenant changed.
  auto tenants = std::make_shared<Tenants>(*base.tenants);
  Tenant& t = (*tenants)[static_cast<std::size_t>(tenant)];
  for (auto& r : added.allow_http) add_rule(t.http, t.allow_http, std::move(r));
  CowList<std::string> ignored;
  for (auto& r : added.allow_dns) {
    add_rule(snap->tenant_dns, ignored, r);
    add_rule(t.dns, t.allow_dns, std::move(r));
  }
  snap->tenants = std::move(tenants);
  return snap;
}

bool has_rule(const Snapshot& snap, const HttpRule& rule, TenantId tenant) {
  return contains(snap, rule, tenant, &Snapshot::http, &Tenant::http);
}

bool has_rule(const Snapshot& snap, const DnsRule& rule, TenantId tenant) {
  return contains(snap, rule, tenant, &Snapshot::dns, &Tenant::dns);
}

std::shared_ptr<Snapshot> with_tenant_tokens(const Snapshot& base,
                                             std::vector<TenantTokens> tokens) {
  const std::size_t n = base.tenants ? base.tenants->size() : 0;
  if (tokens.size() != n)
    throw std::invalid_argument("with_tenant_tokens: one token for each tenant");
  auto snap = std::make_shared<Snapshot>(base);
  if (n == 0) return snap;
  auto tenants = std::make_shared<Tenants>(*base.tenants);
  for (std::size_t i = 0; i < n; ++i) (*tenants)[i].tokens = std::move(tokens[i]);
  snap->tenants = std::move(tenants);
  return snap;
}

std::shared_ptr<Snapshot> with_credential(const Snapshot& base, Credential c) {
  auto snap = std::make_shared<Snapshot>(base);
  auto list = base.credentials ? std::make_shared<Credentials>(*base.credentials)
                               : std::make_shared<Credentials>();
  auto same = std::find_if(list->begin(), list->end(),
                           [&](const Credential& x) { return x.spec.name == c.spec.name; });
  if (same != list->end()) {
    *same = std::move(c);
  } else {
    list->push_back(std::move(c));
  }
  snap->credentials = std::move(list);
  return snap;
}

std::shared_ptr<Snapshot> without_credential(const Snapshot& base, std::string_view name) {
  if (!base.credentials) return nullptr;
  auto list = std::make_shared<Credentials>(*base.credentials);
  if (std::erase_if(*list, [&](const Credential& x) { return x.spec.name == name; }) == 0)
    return nullptr;
  auto snap = std::make_shared<Snapshot>(base);
  if (list->empty()) list.reset();
  snap->credentials = std::move(list);
  return snap;
}

const Credential* credential_conflict(const Snapshot& snap, const CredentialSpec& spec) {
  if (!snap.credentials) return nullptr;
  for (const auto& c : *snap.credentials) {
    if (c.spec.name != spec.name && same_header_same_host(c.spec, spec)) return &c;
  }
  return nullptr;
}

void credentials_for(std::string_view host, std::uint16_t port, const Snapshot& snap,
                     std::vector<const Credential*>& out) {
  out.clear();
  if (!snap.credentials) return;
  std::string storage;
  std::string_view key;
  if (auto ip = IpAddr::parse(
          host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host)) {
    storage = ip->to_string();
    key = storage;
  } else if (auto name = matchable_name(host, storage)) {
    key = *name;
  } else {
    return;
  }
  for (const auto& c : *snap.credentials) {
    if (!credential_matches(c.spec, key, port)) continue;
    const bool header_taken = std::any_of(out.begin(), out.end(), [&](const Credential* x) {
      return iequals_ascii(x->spec.header, c.spec.header);
    });
    if (!header_taken) out.push_back(&c);
  }
}

SnapshotStore::SnapshotStore(std::shared_ptr<const Snapshot> initial)
    : latest_(initial ? std::move(initial) : std::make_shared<const Snapshot>()),
      id_(g_next_store_id.fetch_add(1, std::memory_order_relaxed)),
      alive_(std::make_shared<const char>('\0')) {
  generation_.store(latest_->generation, std::memory_order_release);
}

std::uint64_t SnapshotStore::publish(std::shared_ptr<Snapshot> next) {
  if (!next) throw std::invalid_argument("SnapshotStore::publish: null snapshot");
  std::shared_ptr<const Snapshot> previous;  // released after the lock, outside the writer path
  std::lock_guard<std::mutex> lock(write_mu_);
  // Writers are serialised by write_mu_, so a relaxed read of our own last store suffices.
  const std::uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  next->generation = gen;
  previous = std::move(latest_);
  latest_ = std::move(next);
  // Readers that see the new generation take write_mu_ before touching latest_, so the
  // release here only orders the generation itself; latest_ is protected by the mutex.
  generation_.store(gen, std::memory_order_release);
  return gen;
}

std::shared_ptr<const Snapshot> SnapshotStore::current() const {
  const std::uint64_t gen = generation_.load(std::memory_order_acquire);
  std::vector<CacheEntry>& cache = t_cache;
  CacheEntry* entry = nullptr;
  for (auto& e : cache) {
    if (e.store_id == id_) {
      entry = &e;
      break;
    }
  }
  if (entry != nullptr && entry->generation == gen) return alias(entry->holder);  // fast path

  // Slow path: first use on this thread, or a publish happened since the last read.
  std::shared_ptr<const Snapshot> snap;
  std::uint64_t snap_gen = 0;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    snap = latest_;
    snap_gen = generation_.load(std::memory_order_relaxed);  // consistent with latest_
  }
  auto holder = std::make_shared<const Holder>(Holder{std::move(snap)});
  if (entry == nullptr) {
    std::erase_if(cache, [](const CacheEntry& e) { return e.alive.expired(); });
    if (cache.size() >= kMaxCacheEntries) cache.erase(cache.begin());
    cache.push_back(CacheEntry{id_, snap_gen, alive_, holder});
  } else {
    // Readers still holding the previous holder keep the previous snapshot alive.
    entry->generation = snap_gen;
    entry->holder = holder;
  }
  return alias(holder);
}

}  // namespace vibepit::policy
