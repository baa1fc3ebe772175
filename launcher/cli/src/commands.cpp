#include "vibepit/launcher/cli/commands.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "client_call.hpp"
#include "vibepit/control/client.hpp"
#include "vibepit/launcher/cli/engine.hpp"
#include "vibepit/launcher/cli/session_commands.hpp"
#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/host/terminal_text.hpp"
#include "vibepit/launcher/rules/network_file.hpp"
#include "vibepit/launcher/rules/session_rules.hpp"
#include "vibepit/policy/rules.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using json = nlohmann::json;
namespace {

const char* kGreen = "\033[32m";
const char* kRed = "\033[31m";
const char* kYellow = "\033[33m";
const char* kDim = "\033[2m";
const char* kBold = "\033[1m";
const char* kReset = "\033[0m";

bool process_alive(std::int64_t pid) {
  if (pid <= 0) return true;  // not a process on this host (the launcher's containers)
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string paint(bool on, const char* code, const std::string& text) {
  return on ? code + text + kReset : text;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

fs::path sessions_root(const Common& c) {
  return c.sessions_root.empty() ? control::default_sessions_root() : c.sessions_root;
}

std::string utc_clock(const std::string& ts) {
  // "2026-11-23T03:17:43.056509Z" -> "03:17:43.056"
  auto t = ts.find('T');
  if (t == std::string::npos || ts.size() < t + 13) return ts;
  return ts.substr(t + 1, 12);
}

// A field of a record or an answer, as text to show: what the sandbox may have put there
// (a DNS name can hold any byte) reaches the terminal escaped.
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return "";
  if (it->is_string()) return terminal_safe(it->get<std::string>());
  if (it->is_number() || it->is_boolean()) return it->dump();
  return "";
}

}  // namespace

std::vector<fs::path> live_sessions(const fs::path& root) {
  std::vector<fs::path> out;
  for (const auto& dir : control::list_session_dirs(root)) {
    auto text = [&] {
      std::FILE* f = std::fopen((dir / "session.json").c_str(), "re");
      std::string s;
      if (!f) return s;
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
      std::fclose(f);
      return s;
    }();
    auto j = json::parse(text, nullptr, false);
    std::int64_t pid = j.is_object() ? j.value("pid", std::int64_t{0}) : 0;
    if (process_alive(pid)) out.push_back(dir);
  }
  return out;
}

control::StoredSession select_session(const Common& c) {
  std::string which = c.session;
  if (which.empty()) {
    const char* env = std::getenv("VIBEPIT_SESSION");
    if (env) which = env;
  }
  auto root = sessions_root(c);
  if (!which.empty()) {
    fs::path dir =
        which.find('/') != std::string::npos || which[0] == '.' ? fs::path(which) : root / which;
    if (!fs::exists(dir / "session.json")) {
      throw SelectError{kNoSession, "no session \"" + which + "\" (looked for " +
                                        (dir / "session.json").string() +
                                        "); `vibepit status` lists the running sessions"};
    }
    return control::read_client_set(dir);
  }
  auto live = live_sessions(root);
  if (live.empty()) {
    throw SelectError{kNoSession, "no vibepit session is running (none found under " +
                                      root.string() +
                                      "). Start one with `vibepit run`, or point --session at "
                                      "the directory given to vibepit-proxy --session-dir"};
  }
  if (live.size() > 1) {
    // Several: the one vibepit run started for the project we stand in, if there is one.
    try {
      const char* home = std::getenv("HOME");
      const std::string here = resolve_project(fs::current_path(), home ? home : "").root.string();
      std::vector<control::StoredSession> mine;
      for (const auto& d : live) {
        auto s = control::read_client_set(d);
        if (s.info.project == here) mine.push_back(std::move(s));
      }
      if (mine.size() == 1) return mine.front();
    } catch (const std::runtime_error&) {
      // Not in a project, or an unreadable session: ask, as below.
    }
    std::string list;
    for (const auto& d : live) {
      list += "\n  " + d.filename().string();
      try {
        list += "  " + control::read_client_set(d).info.control;
      } catch (const std::runtime_error&) {
      }
    }
    throw SelectError{kUsage, "several sessions are running; pick one with --session ID:" + list};
  }
  return control::read_client_set(live.front());
}

namespace {

// Entries the user adds from the host are approved as they are saved, so the next
// `vibepit run` applies them without asking. A file outside a usable project is saved, and
// its entries are asked about later.
void approve_own_entries(const Common& c, const fs::path& network_file, const std::string& list,
                         const std::vector<std::string>& entries) {
  const fs::path dir = network_file.parent_path().parent_path();
  const char* home = std::getenv("HOME");
  Project project;
  try {
    project = resolve_project(dir.empty() ? fs::current_path() : dir, home ? home : "");
  } catch (const std::runtime_error&) {
    return;
  }
  NetworkFile add;
  (list == "allow-http" ? add.allow_http : add.allow_dns) = entries;
  Approvals(state_dir_for(c.sessions_root), project).approve(add);
}

}  // namespace

std::vector<std::string> save_allowed(const Common& c, const fs::path& network_file,
                                      const std::string& list,
                                      const std::vector<std::string>& canonical) {
  auto saved = save_entries(network_file, list, canonical);
  approve_own_entries(c, network_file, list, canonical);
  return saved;
}

int cmd_allow(const Common& c, const AllowOptions& a, std::ostream& out, std::ostream& err) {
  const bool http = a.list == "allow-http";
  // Validate locally first, with the server's own messages: nothing is sent on an error.
  std::vector<std::string> canonical;
  std::vector<std::string> errors;
  for (const auto& e : a.entries) {
    if (http) {
      auto r = policy::parse_http_rule(e);
      if (auto* bad = std::get_if<policy::RuleError>(&r)) {
        errors.push_back(bad->message());
      } else {
        canonical.push_back(std::get<policy::HttpRule>(r).text);
      }
    } else {
      auto r = policy::parse_dns_rule(e);
      if (auto* bad = std::get_if<policy::RuleError>(&r)) {
        errors.push_back(bad->message());
      } else {
        canonical.push_back(std::get<policy::DnsRule>(r).text);
      }
    }
  }
  if (!errors.empty()) {
    for (const auto& m : errors) err << "vibepit: " << m << "\n";
    err << "vibepit: nothing was applied (see docs/rules.md for the grammar)\n";
    return kUsage;
  }
  return with_client(c, err, [&](control::ControlClient& client) {
    json body = {{"entries", a.entries}};
    auto r = client.post_json("/v1/" + a.list, body.dump());
    if (r.status != 200) {
      err << "vibepit: the proxy refused: " << api_error(r) << "\n";
      return static_cast<int>(kRefused);
    }
    auto j = json::parse(r.body);
    std::vector<std::string> saved;
    std::string save_error;
    if (a.save) {
      try {
        saved = save_allowed(c, a.network_file, a.list, canonical);
      } catch (const std::exception& e) {
        save_error = e.what();
      }
    }
    if (c.json) {
      j["session"] = client.session().info.id;
      j["saved"] = saved;
      if (a.save) j["file"] = a.network_file.string();
      if (!save_error.empty()) j["save_error"] = save_error;
      out << j.dump() << "\n";
    } else {
      out << "session " << client.session().info.id << ", generation "
          << j["generation"].get<std::uint64_t>() << ":\n";
      for (const auto& e : j["added"]) {
        out << "  " << paint(c.color, kGreen, "+ " + e.get<std::string>()) << "  added\n";
      }
      for (const auto& e : j["existing"]) {
        out << "  = " << e.get<std::string>() << "  already allowed\n";
      }
      if (!saved.empty()) {
        out << "saved " << saved.size() << " entr" << (saved.size() == 1 ? "y" : "ies") << " to "
            << a.network_file.string() << "\n";
      }
    }
    if (!save_error.empty()) {
      err << "vibepit: the rules were applied, but " << save_error << "\n";
      return static_cast<int>(kLocalError);
    }
    return static_cast<int>(kOk);
  });
}

int cmd_rules(const Common& c, std::ostream& out, std::ostream& err) {
  return with_client(c, err, [&](control::ControlClient& client) {
    auto r = client.get("/v1/rules");
    if (r.status != 200) {
      err << "vibepit: " << api_error(r) << "\n";
      return static_cast<int>(kRefused);
    }
    auto j = json::parse(r.body);
    if (c.json) {
      out << j.dump() << "\n";
      return static_cast<int>(kOk);
    }
    out << "session " << client.session().info.id << ", generation "
        << j["generation"].get<std::uint64_t>() << "\n";
    for (const char* key : {"allow-http", "allow-dns", "block-cidr"}) {
      out << paint(c.color, kBold, key) << " (" << j[key].size() << ")\n";
      for (const auto& e : j[key]) out << "  " << e.get<std::string>() << "\n";
    }
    return static_cast<int>(kOk);
  });
}

std::string format_record(const std::string& line, bool color, bool denied_only) {
  auto j = json::parse(line, nullptr, false);
  if (!j.is_object()) return "";
  if (j.contains("lost")) {
    return paint(color, kDim, "... " + str(j, "lost") + " decisions dropped (fell behind)");
  }
  const auto src = str(j, "src");
  const bool close = str(j, "event") == "close";
  const bool held = str(j, "event") == "held";  // ask mode: waiting for the user
  const bool allow = str(j, "verdict") == "allow";
  if (denied_only && (close || allow)) return "";
  std::string verdict = close ? "close" : held ? "HELD" : allow ? "ALLOW" : "DENY";
  std::string what, target, detail;
  if (src == "dns") {
    what = str(j, "qtype");
    target = str(j, "qname");
    detail = str(j, "rcode");
    if (j.value("cached", false)) detail += " cached";
    if (j.contains("addrs") && j["addrs"].is_array() && !j["addrs"].empty()) {
      detail += " ->";
      for (const auto& a : j["addrs"]) detail += " " + a.get<std::string>();
    }
  } else {
    what = str(j, "method");
    // A request decided by method/path rules (plain HTTP, or inside an inspected CONNECT):
    // its normalised path after the authority.
    target = str(j, "host") + ":" + str(j, "port") + str(j, "path");
    if (close) {
      detail = str(j, "bytes_up") + " B up, " + str(j, "bytes_down") + " B down, " + str(j, "ms") +
               " ms";
    } else if (held) {
      detail = "waiting for a decision (vibepit monitor)";
    } else {
      detail = str(j, "status");
      if (!str(j, "addr").empty()) detail += (detail.empty() ? "" : " ") + str(j, "addr");
      // A refusal's own words: what the SNI check saw, what an address check blocked, why an
      // allowed request's upstream failed (its dial, its certificate).
      if (!str(j, "detail").empty()) {
        detail += (detail.empty() ? "" : ": ") + str(j, "detail");
      }
      if (!str(j, "hold").empty()) {
        detail += " (held " + str(j, "held_ms") + " ms: " + str(j, "hold") + ")";
      }
    }
  }
  std::string why = close ? "" : str(j, "reason");
  if (!str(j, "rule").empty()) why += " " + str(j, "rule");
  if (!str(j, "range").empty()) why += " " + str(j, "range");
  std::string out = utc_clock(str(j, "ts")) + "  " + pad(src, 5) + "  ";
  const char* colour = close ? kDim : held ? kYellow : allow ? kGreen : kRed;
  out += paint(color, colour, pad(verdict, 5)) + "  " + pad(what, 7) + "  " + pad(target, 36) +
         "  " + pad(why, 28) + "  " + detail;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int cmd_logs(const Common& c, const LogsOptions& l, std::ostream& out, std::ostream& err) {
  return with_client(c, err, [&](control::ControlClient& client) {
    auto emit = [&](const std::string& line) {
      if (c.json) {
        if (l.denied) {
          auto j = json::parse(line, nullptr, false);
          if (!j.is_object() || str(j, "verdict") != "deny" || str(j, "event") == "close") return;
        }
        out << line << "\n";
      } else {
        auto text = format_record(line, c.color, l.denied);
        if (!text.empty()) out << text << "\n";
      }
      out.flush();
    };
    // What the ring holds now, oldest first, keeping the newest `limit`.
    std::deque<std::string> recent;
    std::uint64_t after = 0;
    for (int page = 0; page < 10'000; ++page) {
      auto r = client.get("/v1/decisions?limit=1000&after=" + std::to_string(after));
      if (r.status != 200) {
        err << "vibepit: " << api_error(r) << "\n";
        return static_cast<int>(kRefused);
      }
      // ordered_json: the records keep the field order of the decision log.
      auto j = nlohmann::ordered_json::parse(r.body);
      for (const auto& rec : j["records"]) {
        recent.push_back(rec.dump());
        if (recent.size() > l.limit) recent.pop_front();
      }
      auto next = j["next"].get<std::uint64_t>();
      if (next == after || j["records"].empty()) break;
      after = next;
    }
    for (const auto& line : recent) emit(line);
    if (!l.follow) return static_cast<int>(kOk);
    client.stream_lines("/v1/decisions?follow=1&after=" + std::to_string(after),
                        [&](std::string_view line) {
                          emit(std::string(line));
                          return true;
                        });
    err << "vibepit: the proxy ended the decision stream\n";
    return static_cast<int>(kOk);
  });
}

int cmd_status(const Common& c, std::ostream& out, std::ostream& err) {
  fs::path root;
  try {
    root = sessions_root(c);
  } catch (const std::runtime_error& e) {
    err << "vibepit: " << e.what() << "\n";
    return kLocalError;
  }
  // Container state for sessions vibepit run started; standalone proxies have none, and
  // a machine without Docker still gets the proxies' own answers.
  std::map<std::string, DockerSession> containers;
  std::string engine;
  try {
    auto docker = connect_engine();
    const auto& v = docker.version();
    engine = std::string(docker::to_string(v.engine)) + " " + v.version + " (API " +
             v.negotiated.to_string() + ") at " + v.socket;
    containers = docker_sessions(docker);
  } catch (const std::exception& e) {
    const std::string why = e.what();
    engine = "none answered (" + why.substr(0, why.find('\n')) + ")";
  }
  if (!c.json) out << "engine: " << engine << "\n";
  json rows = json::array();
  std::size_t silent = 0;
  for (const auto& dir : live_sessions(root)) {
    const auto in_docker = containers.find(dir.filename().string());
    const std::string state = in_docker == containers.end() ? "" : describe(in_docker->second);
    try {
      control::ControlClient client(control::read_client_set(dir), std::chrono::seconds(3));
      auto health = client.get("/v1/health");
      auto stats = client.get("/v1/stats");
      if (health.status != 200 || stats.status != 200) throw std::runtime_error("no answer");
      auto h = json::parse(health.body);
      auto s = json::parse(stats.body);
      rows.push_back({{"id", client.session().info.id},
                      {"dir", dir.string()},
                      {"control", client.session().info.control},
                      {"project", client.session().info.project},
                      {"state", state.empty() ? "running" : state},
                      {"generation", h["generation"]},
                      {"decisions", s["totals"]["decisions"]},
                      {"allow", s["totals"]["allow"]},
                      {"deny", s["totals"]["deny"]},
                      {"bytes_up", s["bytes"]["up"]},
                      {"bytes_down", s["bytes"]["down"]},
                      {"dns_cache_hit_rate", s["dns"]["cache_hit_rate"]}});
    } catch (const std::exception&) {
      if (state.empty()) {
        ++silent;
        continue;
      }
      // The proxy container is down: say what Docker says, without counters.
      rows.push_back({{"id", dir.filename().string()},
                      {"dir", dir.string()},
                      {"control", ""},
                      {"project", ""},
                      {"state", state},
                      {"error", "the control API did not answer"}});
    }
  }
  auto num = [](const json& r, const char* key) {
    return r.contains(key) ? r[key].dump() : std::string("-");
  };
  if (c.json) {
    out << rows.dump() << "\n";
  } else if (!rows.empty()) {
    out << paint(c.color, kBold,
                 pad("SESSION", 14) + pad("GEN", 6) + pad("ALLOW", 9) + pad("DENY", 9) +
                     pad("BYTES UP/DOWN", 18) + pad("STATE", 10) + "PROJECT")
        << "\n";
    for (const auto& r : rows) {
      const std::string st = r["state"].get<std::string>();
      const std::string project = r["project"].get<std::string>();
      // The state last but one: a long one ("proxy exited: ...") pushes only the project.
      out << pad(r["id"].get<std::string>(), 14) << pad(num(r, "generation"), 6)
          << pad(num(r, "allow"), 9) << pad(num(r, "deny"), 9)
          << pad(num(r, "bytes_up") + "/" + num(r, "bytes_down"), 18)
          << (st == "running" ? pad(st, 10) : paint(c.color, kRed, pad(st, 10)))
          << (project.empty() ? "-" : project) << "\n";
    }
  }
  if (silent)
    err << "vibepit: " << silent << " session director" << (silent == 1 ? "y" : "ies") << " under "
        << root.string() << " did not answer\n";
  if (rows.empty()) {
    if (!c.json) err << "vibepit: no running session found under " << root.string() << "\n";
    return kNoSession;
  }
  return kOk;
}

}  // namespace vibepit::launcher
