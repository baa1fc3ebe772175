// The report for people (Markdown, for a CI job's summary) and for CI systems (JUnit XML).
// Hosts come from the sandbox, so every one is reduced to characters that cannot change
// the markup around it.
#include <sstream>

#include "vibepit/launcher/ci/ci_report.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::launcher {
namespace {

// Name and address characters pass; anything else becomes '?'. Host names are ASCII (IDNA),
// so only an invalid target written by a hostile client loses characters here.
std::string plain(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_' || c == ':' || c == '*' || c == '[' ||
                    c == ']' || c == '/';
    out.push_back(ok ? c : '?');
  }
  return out;
}

std::string target(const Destination& d) {
  if (d.protocol == "dns") return plain(d.host);
  return policy::join_host_port(plain(d.host), d.port);
}

std::string bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::ostringstream o;
  o.precision(u == 0 ? 0 : 1);
  o << std::fixed << v << " " << units[u];
  return o.str();
}

// The command line for a code span: printable ASCII, without the characters that would end
// the span or the table cell, or open markup.
std::string command_text(const CiReport& r) {
  std::string out;
  for (const auto& a : r.command) out += (out.empty() ? "" : " ") + a;
  for (char& c : out)
    if (c < 0x20 || c >= 0x7f || c == '`' || c == '|' || c == '<' || c == '>') c = '?';
  return out;
}

// Prose that may hold bytes from elsewhere (an error from the engine, the proxy or a file
// name): printable ASCII passes, except the characters that would open markup or end a
// code span or a table cell; anything else becomes '?'.
std::string prose(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c < 0x20 || c >= 0x7f || c == '`' || c == '|' || c == '<' || c == '>' || c == '[' ||
        c == ']' || c == '*' || c == '\\' || c == '!')
      c = '?';
  return out;
}

// What happened to the command, in one sentence.
std::string outcome_text(const CiReport& r) {
  if (!r.outcome.interrupted.empty())
    return "vibepit ci was interrupted (" + r.outcome.interrupted + ") before the command ended";
  if (!r.outcome.error.empty())
    return "the command did not run to its end: " + prose(r.outcome.error);
  if (r.outcome.status) return "the command exited " + std::to_string(*r.outcome.status);
  return "the command did not run";
}

std::string verdict_label(std::string_view v) {
  return v == "deny" ? "❌ denied" : v == "would_deny" ? "⚠️ would deny" : "✅ allowed";
}

std::string xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // XML 1.0 allows no control characters but tab and newline; keep ASCII only.
        out.push_back((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' ? c : '?');
    }
  }
  return out;
}

std::string hint(const Destination& d) {
  if (d.reason != "not_allowlisted") return "no rule can allow it";
  return d.protocol == "dns" ? "to allow it: vibepit allow-dns " + target(d) +
                                   ", or allow-dns in .vibepit/network.yaml"
                             : "to allow it: vibepit allow-http " + target(d) +
                                   ", or allow-http in .vibepit/network.yaml";
}

}  // namespace

std::string to_markdown(const CiReport& r) {
  std::ostringstream o;
  o << "## vibepit ci: egress report (" << to_string(r.mode) << ")\n\n";
  o << "`" << command_text(r) << "`: " << outcome_text(r) << ". ";
  o << r.destinations.size() << " destinations: " << r.count_where("allow") << " allowed, "
    << r.count_where("deny") << " denied";
  if (r.mode != CiMode::enforce) o << ", " << r.count_where("would_deny") << " would be denied";
  o << ". vibepit ci exits " << r.exit_status << ": " << prose(r.exit_reason) << ".\n\n";
  if (!r.incomplete.empty()) {
    o << "**⚠️ This report is incomplete**, so it cannot show that the job reached for nothing "
         "else:\n\n";
    for (const auto& why : r.incomplete) o << "- " << prose(why) << "\n";
    o << "\n";
  }
  if (!r.destinations.empty()) {
    o << "| verdict | destination | protocol | requests | sent | received | reason | rule |\n";
    o << "|---|---|---|--:|--:|--:|---|---|\n";
    for (const auto& d : r.destinations) {
      o << "| " << verdict_label(d.verdict) << " | `" << target(d) << "` | " << d.protocol << " | "
        << d.count << " | " << bytes(d.bytes_up) << " | " << bytes(d.bytes_down) << " | "
        << plain(d.reason) << " | " << (d.rule.empty() ? "" : "`" + plain(d.rule) + "`") << " |\n";
    }
    o << "\n";
  }
  if (r.mode == CiMode::learn) {
    o << "Proposed `.vibepit/network.yaml` (the smallest rule set that allows what the job "
         "did):\n\n```yaml\nallow-http:\n";
    for (const auto& e : r.proposal_http) o << "  - \"" << plain(e) << "\"\n";
    o << "allow-dns:\n";
    for (const auto& e : r.proposal_dns) o << "  - \"" << plain(e) << "\"\n";
    o << "```\n";
  }
  if (r.skipped_lines)
    o << "\n" << r.skipped_lines << " lines of the decision log were not decision records.\n";
  return o.str();
}

std::string to_junit(const CiReport& r) {
  const auto failures = r.count_where("deny");
  const auto skipped = r.count_where("would_deny");
  const auto errors = r.incomplete.empty() ? 0 : 1;  // the report's own completeness
  const auto tests = r.destinations.size() + errors;
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<testsuites name=\"vibepit ci\" tests=\"" << tests << "\" failures=\"" << failures
    << "\" errors=\"" << errors << "\" skipped=\"" << skipped << "\">\n";
  o << "  <testsuite name=\"vibepit egress (" << to_string(r.mode) << ")\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" skipped=\"" << skipped
    << "\" timestamp=\"" << xml(r.started) << "\">\n";
  o << "    <properties>\n";
  o << "      <property name=\"mode\" value=\"" << to_string(r.mode) << "\"/>\n";
  o << "      <property name=\"generation\" value=\"" << r.generation << "\"/>\n";
  o << "      <property name=\"command\" value=\"" << xml(command_text(r)) << "\"/>\n";
  o << "      <property name=\"outcome\" value=\"" << xml(outcome_text(r)) << "\"/>\n";
  o << "    </properties>\n";
  for (const auto& d : r.destinations) {
    o << "    <testcase classname=\"vibepit.egress." << d.protocol << "\" name=\"" << xml(target(d))
      << "\">";
    const std::string what = std::to_string(d.count) + " request" + (d.count == 1 ? "" : "s") +
                             " to " + target(d) + " over " + d.protocol;
    if (d.verdict == "deny") {
      o << "\n      <failure type=\"" << xml(d.reason) << "\" message=\"denied: " << xml(d.reason)
        << "\">"
        << xml(what + ": " + std::to_string(d.denied) + " denied (" + d.reason + "); " + hint(d))
        << "</failure>\n    ";
    } else if (d.verdict == "would_deny") {
      o << "\n      <skipped message=\"would be denied in enforce mode (" << xml(d.reason) << "); "
        << xml(hint(d)) << "\"/>\n    ";
    }
    o << "</testcase>\n";
  }
  if (errors) {
    std::string why;
    for (const auto& w : r.incomplete) why += (why.empty() ? "" : "; ") + w;
    o << "    <testcase classname=\"vibepit.report\" name=\"complete\">\n      <error "
         "type=\"incomplete\" message=\"the report is incomplete\">"
      << xml(why) << "</error>\n    </testcase>\n";
  }
  o << "  </testsuite>\n</testsuites>\n";
  return o.str();
}

}  // namespace vibepit::launcher
