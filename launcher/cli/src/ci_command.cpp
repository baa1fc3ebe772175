#include "vibepit/launcher/cli/ci_command.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <ostream>
#include <string_view>
#include <thread>

#include "vibepit/control/client.hpp"
#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/ci/ci_stream.hpp"
#include "vibepit/launcher/ci/learn.hpp"
#include "vibepit/launcher/cli/engine.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"
#include "vibepit/launcher/host/untrusted_file.hpp"
#include "vibepit/launcher/rules/session_rules.hpp"
#include "vibepit/launcher/session/session_start.hpp"
#include "vibepit/policy/ip.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;

namespace {

// What the signal watcher needs to stop a run at any point.
struct Stop {
  std::mutex mu;
  docker::Client docker;   // negotiated (its engine's traits too)
  std::string session_id;  // set once something of the session may exist
  std::string sandbox_id;  // set once the sandbox is created
  std::atomic<int> signal{0};
};
Stop g_stop;

struct Interrupted : std::runtime_error {
  Interrupted() : std::runtime_error("interrupted") {}
};

// The first SIGINT/SIGTERM/SIGHUP kills the sandbox (the command ends, the report is still
// written) or, before there is one, removes what exists of the session so that set-up fails
// fast. A second one exits at once.
void watch_signals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) != 0) continue;
    if (g_stop.signal.exchange(sig) != 0) ::_exit(128 + sig);
    const char msg[] = "\nvibepit ci: stopping; the report will say so\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    std::lock_guard lock(g_stop.mu);
    try {
      docker::Client c(g_stop.docker);
      if (!g_stop.sandbox_id.empty())
        c.container_kill(g_stop.sandbox_id, "KILL");
      else if (!g_stop.session_id.empty())
        remove_session(c, g_stop.session_id);
    } catch (const std::exception&) {
      // The main thread's own clean-up removes the session by label.
    }
  }
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
  }
  return "signal " + std::to_string(sig);
}

// The pipeline's own checkout is trusted: .vibepit/network.yaml applies as written, and
// --policy adds files. vibepit as root reads them when they are the project owner's too:
// the checkout is theirs, and so is what vibepit ci wrote there (a learned file).
NetworkFile ci_rules(const Project& project, const CiOptions& o) {
  std::vector<NamedSource> sources;
  const auto owner = owner_trusted_by_root(project.root);
  sources.push_back({".vibepit/network.yaml",
                     read_network_file(project.root / ".vibepit" / "network.yaml", owner)});
  for (const auto& p : o.policies) {
    if (!fs::exists(p)) throw std::runtime_error("--policy " + p.string() + ": no such file");
    sources.push_back({p.string(), read_network_file(p, owner)});
  }
  NetworkFile flags;
  flags.allow_http = o.allow_http;
  flags.allow_dns = o.allow_dns;
  flags.presets = o.presets;
  sources.push_back({"the command line", flags});
  return merge_rules(sources);
}

// Follows the session's decision stream from its first record, on a thread of its own and
// into a report of its own, until the proxy ends the stream with its final counters (it
// stops) or the stream breaks. The report is made from this stream, never from the log
// file: the job shares a filesystem with that file and could fill it, and it rotates.
class Follower {
 public:
  explicit Follower(const fs::path& session_dir)
      : tally_(partial_), thread_([this, session_dir] { run(session_dir); }) {}
  ~Follower() {
    if (thread_.joinable()) thread_.join();
  }
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // Waits for the stream to end, then moves what it gathered into `r`.
  void finish_into(CiReport& r) {
    thread_.join();
    tally_.finish();
    r.destinations = std::move(partial_.destinations);
    r.generation = partial_.generation;
    r.skipped_lines = partial_.skipped_lines;
    r.destinations_over_limit = partial_.destinations_over_limit;
    r.records_received = tally_.received();
    r.records_missing = tally_.missing();
    r.records_dropped = tally_.dropped();
    r.records_unwritten = tally_.unwritten();
    for (auto& p : tally_.problems(error_)) r.incomplete.push_back(std::move(p));
  }

 private:
  void run(const fs::path& dir) {
    try {
      control::ControlClient client(control::read_client_set(dir));
      client.stream_lines("/v1/decisions?follow=1&after=0", [this](std::string_view line) {
        tally_.line(line);
        return true;
      });
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }

  CiReport partial_;
  StreamTally tally_;
  std::string error_;
  std::thread thread_;  // last: it starts once the rest is made
};

// In GitHub Actions, the runner takes "::command::" lines in a step's output as workflow
// commands: the job could mask vibepit's own lines (add-mask), forge its annotations or set
// outputs and environment for later steps. While the job's output passes through, they are
// switched off with a token the job never sees (::stop-commands::), and back on after.
class WorkflowCommandsOff {
 public:
  WorkflowCommandsOff() {
    const char* gha = std::getenv("GITHUB_ACTIONS");
    if (gha == nullptr || std::string_view(gha) != "true") return;
    token_ = control::new_session_id() + control::new_session_id();
    say("::stop-commands::" + token_ + "\n");
  }
  ~WorkflowCommandsOff() {
    if (!token_.empty()) say("::" + token_ + "::\n");
  }
  WorkflowCommandsOff(const WorkflowCommandsOff&) = delete;
  WorkflowCommandsOff& operator=(const WorkflowCommandsOff&) = delete;

 private:
  static void say(const std::string& line) {
    (void)!::write(STDOUT_FILENO, line.data(), line.size());
  }
  std::string token_;
};

// Stops the proxy (gracefully: it writes its last records and ends the stream) and notes in
// the report whether it ended well.
void stop_proxy(docker::Client& docker, const std::string& proxy_id, CiReport& rep,
                std::ostream& err) {
  try {
    docker.container_stop(proxy_id, 15);
    const auto j = docker.container_inspect(proxy_id);
    const int code = j ? (*j)["State"].value("ExitCode", -1) : -1;
    if (code != 0)
      rep.incomplete.push_back("the proxy exited with status " + std::to_string(code) +
                               (code == 137 ? " (killed)" : ""));
  } catch (const std::exception& e) {
    err << "vibepit ci: stopping the proxy: " << e.what() << "\n";
    rep.incomplete.push_back(std::string("the proxy could not be stopped: ") + e.what());
  }
}

std::string render(const CiReport& r, ReportFormat f) {
  switch (f) {
    case ReportFormat::markdown:
      return to_markdown(r);
    case ReportFormat::junit:
      return to_junit(r);
    case ReportFormat::json:
      break;
  }
  return to_json(r);
}

void decide_exit(CiReport& r) {
  const auto denied = r.count_where("deny");
  if (!r.outcome.interrupted.empty()) {
    r.exit_status = 128 + g_stop.signal.load();
    r.exit_reason = "vibepit ci was stopped by " + r.outcome.interrupted;
  } else if (!r.outcome.status) {
    r.exit_status = kRunFailed;
    r.exit_reason = "the command did not run: " + r.outcome.error;
  } else if (!r.incomplete.empty()) {
    r.exit_status = kCiIncomplete;
    r.exit_reason = "the report is incomplete: " + r.incomplete.front();
  } else if (*r.outcome.status == 0 && r.fail_on_deny && denied > 0) {
    r.exit_status = kCiDenied;
    r.exit_reason = "the command exited 0, but " + std::to_string(denied) + " destination" +
                    (denied == 1 ? " was" : "s were") + " denied (--fail-on-deny)";
  } else {
    r.exit_status = *r.outcome.status;
    r.exit_reason = "the command's exit status";
  }
}

// Append the Markdown report to the job summary when the runner names one (GitHub Actions).
void append_step_summary(const CiReport& r, std::ostream& err) {
  const char* path = std::getenv("GITHUB_STEP_SUMMARY");
  if (path == nullptr || *path == '\0') return;
  std::ofstream f(path, std::ios::app);
  f << to_markdown(r);
  if (!f) err << "vibepit ci: could not append to $GITHUB_STEP_SUMMARY (" << path << ")\n";
}

void print_summary(const CiReport& r, std::ostream& err) {
  err << "vibepit ci: " << r.destinations.size() << " destinations: " << r.count_where("allow")
      << " allowed, " << r.count_where("deny") << " denied";
  if (r.mode != CiMode::enforce) err << ", " << r.count_where("would_deny") << " would be denied";
  err << "\n";
  for (const auto& d : r.destinations) {
    if (d.verdict == "allow") continue;
    err << "  " << (d.verdict == "deny" ? "denied     " : "would deny ") << d.protocol << " "
        << (d.protocol == "dns" ? d.host : policy::join_host_port(d.host, d.port)) << " ("
        << d.reason << ")\n";
  }
  err << "vibepit ci: exit " << r.exit_status << ": " << r.exit_reason << "\n";
}

}  // namespace

int cmd_ci(const CiOptions& o, std::ostream& out, std::ostream& err) {
  (void)out;  // stdout belongs to the command
  const bool color = ::isatty(STDERR_FILENO) && std::getenv("NO_COLOR") == nullptr;
  Report report = status_reporter(err, o.quiet, color);
  CiReport rep;
  rep.mode = o.mode;
  rep.command = o.command;
  rep.fail_on_deny = o.fail_on_deny;
  rep.started = now_rfc3339();

  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(watch_signals, set).detach();
  auto check_stop = [] {
    if (g_stop.signal.load() != 0) throw Interrupted();
  };

  std::optional<StartedSession> started;
  std::optional<docker::Client> docker;
  std::optional<Follower> follower;
  // Where the report and the learned rules go, opened before the job can plant symlinks.
  std::optional<OutputDir> report_dir, learn_dir;
  const fs::path learn_path =
      o.learn_file.empty() ? fs::path(".vibepit") / "network.learned.yaml" : o.learn_file;
  fs::path session_dir;
  Project project;
  try {
    const char* home = std::getenv("HOME");
    project = resolve_project(o.path, home ? home : "", state_dir_for(o.sandbox.sessions_root));
    if (!o.report.empty()) report_dir.emplace(o.report.parent_path(), project.root);
    if (o.mode == CiMode::learn)
      learn_dir.emplace(
          o.learn_file.empty() ? project.root / learn_path.parent_path() : learn_path.parent_path(),
          project.root);
    rep.project = project.root.string();
    SessionRequest req;
    req.project = project;
    req.rules = ci_rules(project, o);
    req.command = o.command;
    req.stdin_open = false;
    req.sandbox = o.sandbox;
    req.mode = o.mode == CiMode::enforce ? policy::Mode::enforce : policy::Mode::audit;
    // A job's home does not outlive it, unless the pipeline names a cache to keep.
    req.home = o.cache_home.empty() ? SessionSpec::Home::session : SessionSpec::Home::cache;
    req.home_cache_key = o.cache_home;
    req.secrets = session_secrets(o.sandbox.secrets, req.rules.credentials, err);
    docker.emplace(connect_engine());
    {
      std::lock_guard lock(g_stop.mu);
      g_stop.docker = *docker;
    }
    const fs::path root = o.sandbox.sessions_root.empty() ? control::default_sessions_root()
                                                          : o.sandbox.sessions_root;
    started = start_session(
        *docker, req, report,
        [&](const std::string& id) {
          std::lock_guard lock(g_stop.mu);
          g_stop.session_id = id;
          session_dir = root / id;
        },
        [&](const char*) { check_stop(); });
    req.secrets.clear();  // the proxy has them; this process keeps none
    {
      std::lock_guard lock(g_stop.mu);
      g_stop.sandbox_id = started->sandbox_id;
    }
    follower.emplace(session_dir);
    check_stop();
    auto h = docker->container_attach(started->sandbox_id, false, true, true);
    docker->container_start(started->sandbox_id);
    if (report) report("running " + rep.command.front() + " in the sandbox");
    {
      const WorkflowCommandsOff off;
      pump(h, false, false);
    }
    const int status = docker->container_wait(started->sandbox_id);
    if (g_stop.signal.load() == 0) rep.outcome.status = status;
  } catch (const Interrupted&) {
  } catch (const std::exception& e) {
    if (g_stop.signal.load() == 0) {
      rep.outcome.error = e.what();
      err << "vibepit ci: " << e.what() << "\n";
    }
  }
  if (const int sig = g_stop.signal.load()) rep.outcome.interrupted = signal_name(sig);

  // A graceful stop lets the proxy write its last records before they are read.
  std::lock_guard lock(g_stop.mu);  // from here on the watcher only waits for a second signal
  if (started) stop_proxy(*docker, started->proxy_id, rep, err);
  if (follower) follower->finish_into(rep);
  if (started) bring_back_git_and_say(started->spec.git, started->spec.id, "vibepit ci", err);
  rep.finished = now_rfc3339();
  if (o.mode == CiMode::learn) {
    const Proposal p = propose_rules(rep.destinations);
    rep.proposal_http = p.allow_http;
    rep.proposal_dns = p.allow_dns;
  }
  decide_exit(rep);

  // The report: the session directory always has the JSON; --report adds a file.
  if (!session_dir.empty()) {
    std::ofstream f(session_dir / "report.json", std::ios::trunc);
    f << to_json(rep);
  }
  fs::path report_path;
  try {
    if (!o.report.empty()) {
      // Not opened before the run only when the run never started: nothing was planted.
      if (!report_dir) report_dir.emplace(o.report.parent_path(), project.root);
      report_path = report_dir->path() / o.report.filename();
      report_dir->write(o.report.filename().string(), render(rep, o.format));
    }
    if (learn_dir) {
      learn_dir->write(learn_path.filename().string(),
                       proposal_yaml({rep.proposal_http, rep.proposal_dns},
                                     "`" + rep.command.front() + "` at " + rep.finished));
      err << "vibepit ci: proposed rules written to "
          << (learn_dir->path() / learn_path.filename()).string() << "\n";
    }
  } catch (const std::exception& e) {
    err << "vibepit ci: writing the report: " << e.what() << "\n";
    if (rep.exit_status == 0) rep.exit_status = kRunFailed;
  }
  append_step_summary(rep, err);
  print_summary(rep, err);
  if (!report_path.empty()) err << "vibepit ci: report: " << report_path.string() << "\n";

  if (docker && !g_stop.session_id.empty()) {
    for (const auto& p : remove_session(*docker, g_stop.session_id))
      err << "vibepit ci: cleanup: " << p << "\n";
  }
  return rep.exit_status;
}

}  // namespace vibepit::launcher
