#include "vibepit/launcher/session/bridge_rule.hpp"

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "vibepit/launcher/host/process.hpp"

namespace vibepit::launcher {
namespace {

constexpr const char* kCommentPrefix = "vibepit-session:";

// Linux interface names: 1 to 15 bytes, no '/', ':' or white space; these are stricter, and
// never start like an option.
bool is_interface_name(const std::string& n) {
  return !n.empty() && n.size() <= 15 && n[0] != '-' && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::string iptables_binary() {
  for (const char* p : {"/usr/sbin/iptables", "/sbin/iptables"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

}  // namespace

std::string bridge_rule_comment(const std::string& session_id) {
  return kCommentPrefix + session_id;
}

std::vector<std::string> bridge_rule_args(const std::string& op, const std::string& bridge,
                                          const std::string& session_id) {
  if (!is_interface_name(bridge))
    throw std::invalid_argument("not an interface name: \"" + bridge + "\"");
  return {"-w", "5",     op,   "FORWARD", "-i",        bridge,
          "-o", bridge,  "-m", "comment", "--comment", bridge_rule_comment(session_id),
          "-j", "ACCEPT"};
}

std::vector<std::pair<std::string, std::vector<std::string>>> bridge_rules_in(
    const std::string& listing) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    // -A FORWARD -i B -o B -m comment --comment "vibepit-session:ID" -j ACCEPT (iptables-nft
    // quotes the comment, iptables-legacy does not)
    if (w.size() == 12 && w[9].size() >= 2 && w[9].front() == '"' && w[9].back() == '"')
      w[9] = w[9].substr(1, w[9].size() - 2);
    if (w.size() != 12 || w[0] != "-A" || w[1] != "FORWARD" || w[2] != "-i" || w[4] != "-o" ||
        w[3] != w[5] || w[8] != "--comment" || w[10] != "-j" || w[11] != "ACCEPT" ||
        w[9].rfind(kCommentPrefix, 0) != 0)
      continue;
    const std::string id = w[9].substr(std::string_view(kCommentPrefix).size());
    try {
      out.emplace_back(id, bridge_rule_args("-D", w[3], id));
    } catch (const std::invalid_argument&) {
      // Not a rule this code made.
    }
  }
  return out;
}

void add_bridge_rule(const std::string& bridge, const std::string& session_id) {
  const std::string bin = iptables_binary();
  if (bin.empty())
    throw std::runtime_error(
        "the session's bridge needs a FORWARD rule on this host and there is no iptables "
        "(apt-get install iptables)");
  auto argv = bridge_rule_args("-I", bridge, session_id);
  argv.insert(argv.begin(), bin);
  int status = 0;
  const std::string out = run_capture(argv, status, Child::Output::pipe_with_stderr);
  if (status != 0)
    throw std::runtime_error("iptables could not let the session's bridge " + bridge +
                             " carry its own traffic (exit " + std::to_string(status) +
                             "): " + out);
}

std::vector<std::string> remove_bridge_rules(const std::string& session_id,
                                             const std::vector<std::string>& keep,
                                             std::vector<std::string>* removed) {
  std::vector<std::string> problems;
  const std::string bin = iptables_binary();
  if (::geteuid() != 0 || bin.empty()) return problems;
  int status = 0;
  const std::string listing = run_capture({bin, "-w", "5", "-S", "FORWARD"}, status);
  if (status != 0) return {"iptables -S FORWARD failed (exit " + std::to_string(status) + ")"};
  // Another vibepit may remove the same rule meanwhile (`vibepit down` racing the attached
  // run's own cleanup): a rule that failed to go and is no longer listed went that way.
  auto still_listed = [&](const std::string& id, const std::vector<std::string>& rule) {
    int st = 0;
    const std::string now = run_capture({bin, "-w", "5", "-S", "FORWARD"}, st);
    if (st != 0) return true;
    for (auto& [other, args] : bridge_rules_in(now))
      if (other == id && args == rule) return true;
    return false;
  };
  for (auto& [id, args] : bridge_rules_in(listing)) {
    if (!session_id.empty() && id != session_id) continue;
    if (std::find(keep.begin(), keep.end(), id) != keep.end()) continue;
    std::vector<std::string> argv = args;
    argv.insert(argv.begin(), bin);
    std::string out = run_capture(argv, status, Child::Output::pipe_with_stderr);
    if (status != 0 && still_listed(id, args))
      problems.push_back("removing the FORWARD rule of session " + id + ": " + out);
    else if (removed && status == 0)
      removed->push_back(id);
  }
  return problems;
}

}  // namespace vibepit::launcher
