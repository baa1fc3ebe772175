#include "vibepit/launcher/monitor/screen.hpp"

#include <algorithm>

#include "vibepit/launcher/host/terminal_text.hpp"

namespace vibepit::launcher::monitor {
namespace {

// Cut or pad `s` to `w` columns; a cut ends in '~'.
std::string fit(std::string s, int w, bool right = false) {
  if (w <= 0) return {};
  const auto width = static_cast<std::size_t>(w);
  if (s.size() > width) {
    s.resize(width);
    s.back() = '~';
    return s;
  }
  const std::string pad(width - s.size(), ' ');
  return right ? pad + s : s + pad;
}

// The proxy's reasons, in the width the table gives them; any other text as it came.
std::string short_reason(const std::string& reason) {
  if (reason == "allowlisted") return "rule";
  if (reason == "not_allowlisted") return "no rule";
  if (reason == "blocked_address") return "blocked";
  if (reason == "resolve_failed") return "no address";
  if (reason == "invalid_target") return "invalid";
  if (reason == "rate_limited") return "rate limit";
  return reason;
}

std::string proto_text(Proto p) {
  return p == Proto::connect ? "conn" : std::string(to_string(p));
}

}  // namespace

std::string count_text(std::uint64_t n) {
  if (n < 100'000) return std::to_string(n);
  if (n < 10'000'000) return std::to_string(n / 1000) + "k";
  return std::to_string(n / 1'000'000) + "M";
}

std::string age(std::int64_t us) {
  const std::int64_t s = std::max<std::int64_t>(us, 0) / 1'000'000;
  if (s < 100) return std::to_string(s) + "s";
  if (s < 100 * 60) return std::to_string(s / 60) + "m";
  if (s < 48 * 3600) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::vector<Line> layout(const Model& m, int width, int height, std::int64_t now_us,
                         const std::string& message) {
  std::vector<Line> out;
  if (width <= 0 || height <= 0) return out;
  const auto& st = m.status();

  // What matters most first: a narrow terminal cuts the end, so the session's id (12
  // characters, and the help line says which program this is) comes last, and counts are
  // kept short.
  std::string status = st.connected ? "" : "RECONNECTING  ";
  status += "held " + count_text(m.held_count()) + "  denied " + count_text(m.denied()) +
            "  allowed " + count_text(m.allowed()) + (m.showing_allowed() ? "" : " (hidden)") +
            "  " + (st.mode.empty() ? "enforce" : terminal_safe(st.mode)) + " gen " +
            count_text(st.generation) + "  ask " +
            (st.ask ? age(static_cast<std::int64_t>(st.ask_timeout_ms) * 1000) : "off");
  if (!m.filter().empty()) status += "  filter \"" + terminal_safe(m.filter()) + "\"";
  status += "  session " + terminal_safe(st.session);
  out.push_back({fit(status, width), Tone::status});
  if (height == 1) return out;

  // Columns: mark, proto, host, port, count, last seen, verdict, reason, rule. Host and rule
  // share what is left, two to one.
  constexpr int kMark = 1, kProto = 4, kPort = 5, kCount = 6, kLast = 4, kVerdict = 8, kReason = 10,
                kGaps = 8;
  const int flex =
      std::max(width - (kMark + kProto + kPort + kCount + kLast + kVerdict + kReason + kGaps), 2);
  const int host_w = flex - flex / 3, rule_w = flex / 3;
  auto columns = [&](const std::string& mark, const std::string& proto, const std::string& host,
                     const std::string& port, const std::string& count, const std::string& last,
                     const std::string& verdict, const std::string& reason,
                     const std::string& rule) {
    return fit(fit(mark, kMark) + fit(proto, kProto) + " " + fit(host, host_w) + " " +
                   fit(port, kPort, true) + " " + fit(count, kCount, true) + " " +
                   fit(last, kLast, true) + " " + fit(verdict, kVerdict) + " " +
                   fit(reason, kReason) + " " + fit(rule, rule_w),
               width);
  };
  out.push_back({columns(" ", "PROT", "HOST", "PORT", "COUNT", "LAST", "VERDICT", "REASON", "RULE"),
                 Tone::header});

  const int body = std::max(height - 4, 0);
  const auto rows = m.visible();
  const auto sel = m.selected_index();
  // Scroll so that the selection is on screen.
  std::size_t first = 0;
  if (body > 0 && sel >= static_cast<std::size_t>(body)) first = sel - body + 1;
  for (int i = 0; i < body; ++i) {
    const std::size_t at = first + static_cast<std::size_t>(i);
    if (at >= rows.size()) {
      out.push_back({std::string(static_cast<std::size_t>(width), ' '), Tone::empty});
      continue;
    }
    const Row& r = *rows[at];
    const bool selected = at == sel;
    std::string verdict = r.verdict, last = r.last_us ? age(now_us - r.last_us) : "";
    Tone tone = r.verdict == "allow" ? Tone::allowed : Tone::denied;
    if (r.pending()) {
      verdict = "HELD " + age(now_us - r.held_since_us);  // the oldest of its held requests
      tone = Tone::held;
    }
    out.push_back({columns(selected ? ">" : " ", proto_text(r.key.proto), terminal_safe(r.key.host),
                           r.key.proto == Proto::dns ? "" : std::to_string(r.key.port),
                           count_text(r.count + r.held.size()), last, verdict,
                           terminal_safe(short_reason(r.reason)), terminal_safe(r.rule)),
                   tone, selected});
  }
  if (static_cast<int>(out.size()) < height - 1) {
    out.push_back({fit(terminal_safe(message), width), Tone::message});
  }
  if (static_cast<int>(out.size()) < height) {
    out.push_back({fit("monitor: j/k move  a allow  A allow+save  d refuse  f allowed  / filter  "
                       "q quit",
                       width),
                   Tone::help});
  }
  out.resize(static_cast<std::size_t>(height),
             {std::string(static_cast<std::size_t>(width), ' '), Tone::empty});
  return out;
}

}  // namespace vibepit::launcher::monitor
