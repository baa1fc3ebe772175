// vibepit monitor. Two threads feed the model: one follows the decision stream, one asks
// for the held requests every second (which also tells whether the proxy still answers).
// The main thread owns the terminal: it takes what they brought, lays the screen out, draws
// it and acts on keys, each action one control API call with the same mTLS client as
// `vibepit allow-http`.
#include "vibepit/launcher/cli/monitor_command.hpp"

#include <curses.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "vibepit/control/client.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"
#include "vibepit/launcher/host/project.hpp"
#include "vibepit/launcher/monitor/screen.hpp"
#include "vibepit/policy/rules.hpp"

namespace vibepit::launcher {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using monitor::Model;

// How long the proxy may not answer before the monitor takes the session as ended.
constexpr auto kGone = 5s;

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the two feeding threads bring the main thread. Shared with them: the stream's thread
// may be left waiting for its next line when the user quits.
struct Inbox {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::deque<std::string> lines;  // decision-stream lines, at most kMaxLines
  std::optional<std::vector<monitor::Pending>> pending;
  std::int64_t pending_as_of = 0;      // when it was asked for (wall clock, microseconds)
  std::optional<monitor::Status> ask;  // ask settings from /v1/pending
  bool connected = true;
  std::string ended;  // why the session ended, once it has
  static constexpr std::size_t kMaxLines = 20'000;

  void push(std::string line) {
    std::lock_guard lock(mu);
    if (lines.size() >= kMaxLines) lines.pop_front();  // a flood costs old lines, not memory
    lines.push_back(std::move(line));
  }
};

monitor::Proto proto_of(const std::string& method) {
  return method == "CONNECT" ? monitor::Proto::connect : monitor::Proto::http;
}

// Follow the decision stream from `after`, reconnecting, until the feed ends or `stop`.
void follow(const control::StoredSession& session, std::uint64_t after,
            const std::shared_ptr<Inbox>& box) {
  Inbox& in = *box;
  const auto& stop = in.stop;
  while (!stop.load()) {
    try {
      control::ControlClient client(session, 3s);
      client.stream_lines(
          "/v1/decisions?follow=1&after=" + std::to_string(after),
          [&](std::string_view line) {
            auto j = json::parse(line, nullptr, false);
            if (j.is_object() && j.contains("seq") && j["seq"].is_number_unsigned())
              after = j["seq"].get<std::uint64_t>();
            in.push(std::string(line));
            return !stop.load();
          },
          10s);
    } catch (const std::exception&) {
      // Down for now: the poller says when it is gone for good.
    }
    for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(100ms);
  }
}

// Ask for the held requests every second; note when the proxy stops answering.
void poll_pending(const control::StoredSession& session, const std::shared_ptr<Inbox>& box) {
  Inbox& in = *box;
  const auto& stop = in.stop;
  auto last_ok = std::chrono::steady_clock::now();
  while (!stop.load()) {
    try {
      control::ControlClient client(session, 2s);
      const auto asked_at = now_us();
      auto r = client.get("/v1/pending");
      auto j = json::parse(r.body, nullptr, false);
      if (r.status == 200 && j.is_object()) {
        std::vector<monitor::Pending> list;
        for (const auto& p : j.value("pending", json::array())) {
          list.push_back({p.value("id", std::uint64_t{0}), proto_of(p.value("method", "")),
                          p.value("host", ""), p.value("port", std::uint16_t{0}),
                          p.value("since_us", std::int64_t{0})});
        }
        monitor::Status ask;
        ask.ask = j["ask"].value("enabled", false);
        ask.ask_timeout_ms = j["ask"].value("timeout_ms", std::uint64_t{0});
        auto health = json::parse(client.get("/v1/health").body, nullptr, false);
        if (health.is_object()) ask.generation = health.value("generation", std::uint64_t{0});
        std::lock_guard lock(in.mu);
        in.pending = std::move(list);
        in.pending_as_of = asked_at;
        in.ask = ask;
        in.connected = true;
        last_ok = std::chrono::steady_clock::now();
      }
    } catch (const std::exception&) {
      std::lock_guard lock(in.mu);
      in.connected = false;
      if (std::chrono::steady_clock::now() - last_ok > kGone) {
        in.ended = "its proxy has not answered for 5 s";
        return;
      }
    }
    for (int i = 0; i < 10 && !stop.load(); ++i) std::this_thread::sleep_for(100ms);
  }
}

// The rules' mode and generation, and the history the ring still holds, into the model;
// returns the sequence to follow from.
std::uint64_t load_history(control::ControlClient& client, Model& m) {
  auto rules = json::parse(client.get("/v1/rules").body, nullptr, false);
  if (rules.is_object()) {
    m.status().mode = rules.value("mode", "");
    m.status().generation = rules.value("generation", std::uint64_t{0});
  }
  std::uint64_t after = 0;
  for (int page = 0; page < 100; ++page) {
    auto r = client.get("/v1/decisions?limit=1000&after=" + std::to_string(after));
    if (r.status != 200) break;
    auto j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j["records"].is_array() || j["records"].empty()) break;
    for (const auto& rec : j["records"]) m.on_line(rec.dump());
    after = j.value("next", after);
  }
  return after;
}

std::string host_port(const monitor::Key& k) {
  const bool v6 = k.host.find(':') != std::string::npos;
  return (v6 ? "[" + k.host + "]" : k.host) + ":" + std::to_string(k.port);
}

class Terminal {
 public:
  explicit Terminal(bool color) {
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(200);
    set_escdelay(25);
    color_ = color && has_colors();
    if (color_) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_YELLOW, -1);
      init_pair(2, COLOR_RED, -1);
      init_pair(3, COLOR_GREEN, -1);
    }
  }
  ~Terminal() { endwin(); }
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  void draw(const std::vector<monitor::Line>& lines) {
    erase();
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const auto& l = lines[i];
      attr_t a = A_NORMAL;
      switch (l.tone) {
        case monitor::Tone::status:
          a = A_REVERSE;
          break;
        case monitor::Tone::header:
          a = A_BOLD;
          break;
        case monitor::Tone::held:
          a = A_BOLD | (color_ ? COLOR_PAIR(1) : 0);
          break;
        case monitor::Tone::denied:
          a = color_ ? COLOR_PAIR(2) : A_NORMAL;
          break;
        case monitor::Tone::allowed:
          a = color_ ? COLOR_PAIR(3) : A_DIM;
          break;
        case monitor::Tone::help:
          a = A_DIM;
          break;
        default:
          break;
      }
      if (l.selected) a |= A_REVERSE;
      attrset(a);
      // The bottom-right cell cannot be written without scrolling: one column short there.
      const int n = static_cast<int>(l.text.size()) - (i + 1 == lines.size() ? 1 : 0);
      mvaddnstr(static_cast<int>(i), 0, l.text.c_str(), n);
    }
    attrset(A_NORMAL);
    refresh();
  }

 private:
  bool color_ = false;
};

control::StoredSession session_for(const Common& c, const MonitorOptions& o) {
  if (o.path.empty()) return select_session(c);
  const char* home = std::getenv("HOME");
  const std::string root = resolve_project(o.path, home ? home : "").root.string();
  const fs::path sessions =
      c.sessions_root.empty() ? control::default_sessions_root() : c.sessions_root;
  for (const auto& d : live_sessions(sessions)) {
    try {
      auto s = control::read_client_set(d);
      if (s.info.project == root) return s;
    } catch (const std::runtime_error&) {
    }
  }
  throw SelectError{
      kNoSession, "no running session for the project " + root + "; start one with `vibepit run`"};
}

// One key's action, through the control API. Returns the message to show.
std::string act(int key, Model& m, control::ControlClient& client, const Common& c,
                const control::StoredSession& session) {
  const monitor::Row* r = m.selected();
  if (!r) return "nothing selected";
  if (key == 'd') {
    if (!r->pending()) return "d refuses a held request; this row has none";
    std::size_t n = 0;
    for (const auto id : std::vector<std::uint64_t>(r->held.begin(), r->held.end())) {
      if (client.post_json("/v1/pending/refuse", json{{"id", id}}.dump()).status == 200) ++n;
    }
    return "refused " + std::to_string(n) + " held request" + (n == 1 ? "" : "s");
  }
  const bool dns = r->key.proto == monitor::Proto::dns;
  const std::string list = dns ? "allow-dns" : "allow-http";
  const std::string entry = dns ? r->key.host : host_port(r->key);
  std::string canonical;
  if (dns) {
    auto p = policy::parse_dns_rule(entry);
    if (auto* bad = std::get_if<policy::RuleError>(&p)) return bad->message();
    canonical = std::get<policy::DnsRule>(p).text;
  } else {
    auto p = policy::parse_http_rule(entry);
    if (auto* bad = std::get_if<policy::RuleError>(&p)) return bad->message();
    canonical = std::get<policy::HttpRule>(p).text;
  }
  auto res = client.post_json("/v1/" + list, json{{"entries", {canonical}}}.dump());
  auto j = json::parse(res.body, nullptr, false);
  if (res.status != 200 || !j.is_object()) {
    return "the proxy refused: " + (j.is_object() ? j.value("error", res.body) : res.body);
  }
  std::string msg = "allowed " + canonical + " (generation " +
                    std::to_string(j.value("generation", std::uint64_t{0})) + ")";
  if (key == 'A') {
    if (session.info.project.empty()) return msg + "; not saved: the session has no project";
    const fs::path file = fs::path(session.info.project) / ".vibepit" / "network.yaml";
    try {
      save_allowed(c, file, list, {canonical});
      msg += ", saved to " + file.string();
    } catch (const std::exception& e) {
      msg += "; not saved: " + std::string(e.what());
    }
  }
  return msg;
}

}  // namespace

int cmd_monitor(const Common& c, const MonitorOptions& o, std::ostream& out, std::ostream& err) {
  if (!::isatty(STDIN_FILENO) || !::isatty(STDOUT_FILENO)) {
    err << "vibepit monitor: needs a terminal on standard input and output; without one, "
           "follow the decisions with `vibepit logs -f`\n";
    return kUsage;
  }
  control::StoredSession session;
  Model m;
  std::uint64_t after = 0;
  try {
    session = session_for(c, o);
    control::ControlClient client(session, 5s);
    after = load_history(client, m);
  } catch (const SelectError& e) {
    err << "vibepit monitor: " << e.message << "\n";
    return e.code;
  } catch (const std::exception& e) {
    err << "vibepit monitor: " << e.what() << "\n";
    return kNoSession;
  }
  m.status().session = session.info.id;

  auto box = std::make_shared<Inbox>();
  Inbox& in = *box;
  std::thread streamer(follow, session, after, box);
  std::thread poller(poll_pending, session, box);
  std::string message = "watching session " + session.info.id, ended;
  {
    Terminal term(std::getenv("NO_COLOR") == nullptr && c.color);
    control::ControlClient actions(session, 5s);
    bool typing = false;
    std::string typed;
    for (bool quit = false; !quit;) {
      {
        std::lock_guard lock(in.mu);
        while (!in.lines.empty()) {
          if (!m.on_line(in.lines.front())) ended = "its proxy stopped";
          in.lines.pop_front();
        }
        if (in.pending) m.set_pending(*std::exchange(in.pending, std::nullopt), in.pending_as_of);
        if (in.ask) {
          m.status().ask = in.ask->ask;
          m.status().ask_timeout_ms = in.ask->ask_timeout_ms;
          m.status().generation = std::max(m.status().generation, in.ask->generation);
        }
        m.status().connected = in.connected;
        if (ended.empty()) ended = in.ended;
      }
      if (!ended.empty()) break;
      int rows = 0, cols = 0;
      getmaxyx(stdscr, rows, cols);
      term.draw(monitor::layout(m, cols, rows, now_us(), typing ? "filter: " + typed : message));
      const int key = getch();
      if (key == ERR || key == KEY_RESIZE) continue;
      if (typing) {
        if (key == '\n' || key == KEY_ENTER) {
          m.set_filter(typed);
          typing = false;
          message = typed.empty() ? "filter cleared" : "filter \"" + typed + "\"";
        } else if (key == 27) {
          typing = false;
          message = "filter unchanged";
        } else if (key == KEY_BACKSPACE || key == 127 || key == 8) {
          if (!typed.empty()) typed.pop_back();
        } else if (key >= 0x20 && key < 0x7f && typed.size() < 253) {
          typed.push_back(static_cast<char>(key));
        }
        continue;
      }
      try {
        switch (key) {
          case 'q':
            quit = true;
            break;
          case KEY_UP:
          case 'k':
            m.move(-1);
            break;
          case KEY_DOWN:
          case 'j':
            m.move(+1);
            break;
          case 'f':
            m.toggle_allowed();
            message = m.showing_allowed() ? "allowed traffic shown" : "allowed traffic hidden";
            break;
          case '/':  // a new filter, as in less: Enter with nothing typed clears it
            typing = true;
            typed.clear();
            break;
          case 'a':
          case 'A':
          case 'd':
            message = act(key, m, actions, c, session);
            break;
          default:
            break;
        }
      } catch (const std::exception& e) {
        message = std::string("failed: ") + e.what();
      }
    }
  }
  in.stop = true;
  poller.join();
  // The stream's thread ends at its next line (a quiet stream sends one every 5 s); the
  // user need not wait for it.
  streamer.detach();
  if (!ended.empty()) {
    out << "vibepit monitor: session " << session.info.id << " ended (" << ended << ")\n";
  }
  return kOk;
}

}  // namespace vibepit::launcher
