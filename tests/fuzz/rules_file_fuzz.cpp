// Fuzz the watched rules file: any bytes give its rules or a RulesFileError, nothing else;
// what parsed merges into a configuration's rules (or names the stranger tenant) and
// compiles whole or not at all.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "vibepit/config/rules_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  vibepit::config::RulesFile file;
  try {
    file = vibepit::config::parse_rules_file(text, "rules.yaml");
  } catch (const vibepit::config::RulesFileError& e) {
    CHECK(std::string(e.what()).rfind("rules.yaml:", 0) == 0);
    return 0;
  }
  for (std::size_t i = 0; i < file.tenants.size(); ++i) {
    for (std::size_t j = i + 1; j < file.tenants.size(); ++j)
      CHECK(file.tenants[i].name != file.tenants[j].name);
  }
  vibepit::policy::RuleSet base;
  base.allow_http = {"base.test:443"};
  base.tenants = {{"team-a", {}, {}}, {"team-b", {"b.test:443"}, {}}};
  vibepit::policy::RuleSet merged;
  try {
    merged = vibepit::config::merge_rules(base, file);
  } catch (const vibepit::config::RulesFileError&) {
    bool stranger = false;
    for (const auto& t : file.tenants) stranger |= t.name != "team-a" && t.name != "team-b";
    CHECK(stranger);
    return 0;
  }
  CHECK(merged.allow_http.size() == 1 + file.allow_http.size());
  CHECK(merged.tenants.size() == 2);
  auto compiled = vibepit::policy::compile(merged, 1);
  if (auto* snap = std::get_if<std::shared_ptr<const vibepit::policy::Snapshot>>(&compiled)) {
    CHECK(*snap && (*snap)->tenants && (*snap)->tenants->size() == 2);
  } else {
    CHECK(!std::get<std::vector<vibepit::policy::RuleError>>(compiled).empty());
  }
  return 0;
}
