#pragma once
// `vibepit ci --mode learn`: the smallest rule set that would have allowed everything a job
// did. Names stay exact unless several names under one registrable domain (Public Suffix
// List, through libpsl) were used on the same port: those become `*.domain`. Ports stay
// exact; names only looked up in DNS go under allow-dns.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/launcher/ci/ci_report.hpp"

namespace vibepit::launcher {

struct Proposal {
  std::vector<std::string> allow_http;  // sorted, canonical, each a valid allow-http entry
  std::vector<std::string> allow_dns;   // sorted, canonical, each a valid allow-dns entry
};

// Destinations that went ahead (allowed, or would_deny in audit) are covered: by the rule
// that allowed them when there was one, else by a learned entry. Denied destinations are
// left out: a rule cannot allow what the appliance blocks whatever the rules say.
Proposal propose_rules(const std::vector<Destination>& destinations);

// The registrable domain of a normalised host name ("a.b.example.co.uk" -> "example.co.uk"),
// or nullopt for IP literals, public suffixes and names that are not valid.
std::optional<std::string> registrable_domain(std::string_view name);

// The proposal as a .vibepit/network.yaml text, with a comment naming where it came from.
std::string proposal_yaml(const Proposal& p, std::string_view origin);

}  // namespace vibepit::launcher
