#pragma once
// The host FORWARD rule that lets the proxy and the sandbox talk across their session's
// internal bridge, where the engine adds none itself (docker::EngineTraits): exactly the
// traffic that enters and leaves that one bridge, as Docker allows on its own bridges. It
// opens no way to the host or out, and carries the session's id, so that removing the
// session (or `vibepit prune`, after a crash) removes it.
#include <string>
#include <utility>
#include <vector>

namespace vibepit::launcher {

// ---- Pure: the rule and finding it again ----

// The comment that marks a session's rule.
std::string bridge_rule_comment(const std::string& session_id);

// iptables arguments (without "iptables") that insert ("-I") or delete ("-D") the rule for
// `bridge`. Throws std::invalid_argument for a name that is not an interface name.
std::vector<std::string> bridge_rule_args(const std::string& op, const std::string& bridge,
                                          const std::string& session_id);

// The vibepit rules in `iptables -S FORWARD` output: each one's session id and the
// arguments that delete it.
std::vector<std::pair<std::string, std::vector<std::string>>> bridge_rules_in(
    const std::string& listing);

// ---- Effects (root) ----

// Insert the rule; throws std::runtime_error with iptables' words when it cannot.
void add_bridge_rule(const std::string& bridge, const std::string& session_id);

// Delete the rules of `session_id` (every session's when it is empty, and only those of
// sessions `keep` does not name); returns problems, one line each, and adds the sessions
// whose rule went to `removed`. Nothing to do (not root, no iptables) is no problem.
std::vector<std::string> remove_bridge_rules(const std::string& session_id,
                                             const std::vector<std::string>& keep = {},
                                             std::vector<std::string>* removed = nullptr);

}  // namespace vibepit::launcher
