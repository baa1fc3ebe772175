#include "vibepit/launcher/cli/run_command.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <ctime>
#include <mutex>
#include <optional>
#include <ostream>
#include <thread>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/cli/engine.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"
#include "vibepit/launcher/host/untrusted_file.hpp"
#include "vibepit/launcher/rules/session_rules.hpp"
#include "vibepit/launcher/session/session.hpp"
#include "vibepit/launcher/session/session_start.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using docker::Json;

namespace {

// State the signal watcher shares with the main thread.
struct Shared {
  std::mutex setup;           // held while the main thread changes the session
  std::string session_id;     // non-empty once something may exist to remove
  docker::Client docker;      // negotiated (its engine's traits too); copies open their own
                              // connections
  std::mutex resize_mu;       // guards the two below (main sets, the watcher reads)
  std::string resize_target;  // container id, or exec id when `is_exec`
  bool is_exec = false;
  std::atomic<bool> tty{false};
  termios saved{};
  std::atomic<bool> raw{false};
};
Shared g;

void restore_terminal() {
  if (g.raw.exchange(false)) ::tcsetattr(STDIN_FILENO, TCSANOW, &g.saved);
}

void set_resize_target(std::string id, bool is_exec) {
  std::lock_guard lock(g.resize_mu);
  g.resize_target = std::move(id);
  g.is_exec = is_exec;
}

void send_size() {
  std::lock_guard lock(g.resize_mu);
  winsize ws{};
  if (!g.tty || g.resize_target.empty() || ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 ||
      ws.ws_row == 0)
    return;
  try {
    docker::Client c(g.docker);
    if (g.is_exec)
      c.exec_resize(g.resize_target, ws.ws_row, ws.ws_col);
    else
      c.container_resize(g.resize_target, ws.ws_row, ws.ws_col);
  } catch (const std::exception&) {
    // The container may be gone already; the size is cosmetic.
  }
}

// Takes SIGINT, SIGTERM and SIGHUP (tear the session down, exit 128+signal) and SIGWINCH
// (forward the window size). The signals are blocked in every other thread.
void watch_signals(sigset_t set) {
  for (;;) {
    int sig = 0;
    if (::sigwait(&set, &sig) != 0) continue;
    if (sig == SIGWINCH) {
      send_size();
      continue;
    }
    std::lock_guard lock(g.setup);
    restore_terminal();
    if (!g.session_id.empty()) {
      const char msg[] = "\nvibepit: stopping the session\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      try {
        docker::Client c(g.docker);
        remove_session(c, g.session_id);
      } catch (const std::exception&) {
      }
    }
    ::_exit(128 + sig);
  }
}

void enter_raw_mode() {
  if (::tcgetattr(STDIN_FILENO, &g.saved) != 0) return;
  termios raw = g.saved;
  ::cfmakeraw(&raw);
  if (::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) g.raw = true;
}

std::optional<Json> running_sandbox(docker::Client& docker, const Project& p) {
  for (const auto& c :
       docker.containers_by_label(std::string(docker::label::kProject) + "=" + p.hash, false)) {
    if (c.contains("Labels") && c["Labels"].value(docker::label::kRole, "") == "sandbox" &&
        c.value("State", "") == "running")
      return c;
  }
  return std::nullopt;
}

// --ask-timeout's seconds, as the proxy's ask-timeout-ms (at least 1).
std::uint64_t ask_timeout_ms(double seconds) {
  return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(seconds * 1000)));
}

// Whether the sandbox ended because its session was removed from outside (vibepit down or
// prune, which remove containers by force): it is gone, or its removal is under way. A killed
// command may also just have been killed, so the answer waits for the removal a moment only.
bool removed_from_outside(docker::Client& docker, const std::string& sandbox) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (;;) {
    std::optional<Json> j;
    try {
      j = docker.container_inspect(sandbox);
    } catch (const std::exception&) {
      return false;  // the engine cannot say
    }
    if (!j) return true;
    const auto state = j->find("State");
    if (state != j->end() && state->is_object() && state->value("Status", "") == "removing")
      return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void say_removed(std::ostream& err) {
  err << "vibepit: the session was removed while the command ran (vibepit down or vibepit "
         "prune)\n";
}

int join(docker::Client& docker, const Json& sandbox, const RunOptions& o, bool tty,
         const Report& report, std::ostream& err) {
  const std::string id = sandbox.value("Id", "");
  const std::string session = sandbox["Labels"].value(docker::label::kSession, "");
  if (report) report("joining session " + session + " (its sandbox is running)");
  if (o.ask) {
    err << "vibepit: --ask not applied: session " << session
        << " is running already and keeps the setting it started with\n";
  }
  Json cmd = o.command.empty() ? Json{"/bin/bash", "-l"} : Json(o.command);
  auto exec = docker.exec_create(id, {{"AttachStdin", true},
                                      {"AttachStdout", true},
                                      {"AttachStderr", true},
                                      {"Tty", tty},
                                      {"Cmd", cmd}});
  set_resize_target(exec, true);
  auto h = docker.exec_start(exec, tty);
  if (tty) {
    enter_raw_mode();
    send_size();
  }
  pump(h, tty, true);
  restore_terminal();
  auto info = docker.exec_inspect(exec);
  return info.value("ExitCode", kRunFailed);
}

// Test-only: with VIBEPIT_TEST_PAUSE=network|proxy|sandbox, stop after that step (saying
// so on stderr) for up to a minute, so the e2e tests can signal or kill a half-made
// session at a known point. The setup lock is released meanwhile, as a signal needs it.
void test_pause(const char* step, std::unique_lock<std::mutex>& lock) {
  const char* want = std::getenv("VIBEPIT_TEST_PAUSE");
  if (!want || std::string_view(want) != step) return;
  const std::string line = std::string("vibepit: test pause after ") + step + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  lock.unlock();
  std::this_thread::sleep_for(std::chrono::seconds(60));
  lock.lock();
}

// An exclusive flock on <state>/locks/<project hash>.lock, held while a session is set up.
class ProjectLock {
 public:
  ProjectLock(const fs::path& state_dir, const Project& project) {
    const fs::path dir = state_dir / "locks";
    fs::create_directories(dir);
    const fs::path path = dir / (project.hash + ".lock");
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) throw std::runtime_error("cannot open " + path.string());
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) throw std::runtime_error("cannot lock " + path.string());
    }
  }
  ~ProjectLock() { release(); }
  ProjectLock(const ProjectLock&) = delete;
  ProjectLock& operator=(const ProjectLock&) = delete;
  void release() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

bool ask_yes(std::ostream& err, const std::string& question) {
  err << question << " [y/N] " << std::flush;
  std::string answer;
  char c = 0;
  while (::read(STDIN_FILENO, &c, 1) == 1 && c != '\n') answer.push_back(c);
  return !answer.empty() && (answer[0] == 'y' || answer[0] == 'Y');
}

// The session's rules: presets, the approved part of .vibepit/network.yaml, and the flags.
// New entries in the file are shown and applied only with the user's yes (a terminal
// prompt, or --yes); the sandbox can write that file, so nothing in it is trusted unseen.
NetworkFile session_rules(const Project& project, const RunOptions& o, std::ostream& err) {
  const fs::path file_path = project.root / ".vibepit" / "network.yaml";
  const NetworkFile file = read_network_file(file_path, owner_trusted_by_root(project.root));
  Approvals approvals(state_dir_for(o.sandbox.sessions_root), project);
  const NetworkFile fresh = approvals.unapproved(file);
  if (!empty(fresh)) {
    err << "vibepit: " << file_path.string() << " has entries you have not approved:\n";
    for (const auto& e : fresh.presets) err << "    + preset " << e << "\n";
    for (const auto& e : fresh.allow_http) err << "    + allow-http " << e << "\n";
    for (const auto& e : fresh.allow_dns) err << "    + allow-dns " << e << "\n";
    for (const auto& e : fresh.credentials)
      err << "    + credential " << e << " (its value from your $" << e.substr(0, e.find('='))
          << ")\n";
    const bool terminal = ::isatty(STDIN_FILENO) && ::isatty(STDERR_FILENO);
    if (o.yes || (terminal && ask_yes(err, "Apply them (and remember that you did)?"))) {
      approvals.approve(fresh);
    } else {
      err << "vibepit: not applied"
          << (terminal || o.yes ? "" : " (no terminal to ask; --yes approves them)")
          << "; the session starts without them\n";
    }
  }
  NetworkFile flags;
  flags.allow_http = o.allow_http;
  flags.allow_dns = o.allow_dns;
  flags.presets = o.presets;
  return merge_rules(
      {{".vibepit/network.yaml", approvals.approved_part(file)}, {"the command line", flags}});
}

}  // namespace

int cmd_run(const RunOptions& o, std::ostream& out, std::ostream& err) {
  (void)out;
  const bool tty = !o.no_tty && ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  g.tty = tty;
  const bool color = ::isatty(STDERR_FILENO) && std::getenv("NO_COLOR") == nullptr;
  Report report = status_reporter(err, o.quiet, color);

  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, s);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(watch_signals, set).detach();

  std::unique_lock lock(g.setup);
  try {
    const char* home = std::getenv("HOME");
    auto project =
        resolve_project(o.path, home ? home : "", state_dir_for(o.sandbox.sessions_root));
    auto docker = connect_engine();
    {
      std::lock_guard resize_lock(g.resize_mu);  // g.setup is held already
      g.docker = docker;
    }
    // One set-up at a time per project: a second vibepit run waits here, then finds the
    // first one's sandbox running and joins it instead of starting another session.
    ProjectLock project_lock(state_dir_for(o.sandbox.sessions_root), project);
    if (auto sandbox = running_sandbox(docker, project)) {
      project_lock.release();
      lock.unlock();
      if (!o.sandbox.secrets.empty()) {
        err << "vibepit: run: --secret applies when a session starts; this one runs already "
               "(vibepit secret add gives it one)\n";
        return kRunFailed;
      }
      return join(docker, *sandbox, o, tty, report, err);
    }

    SessionRequest req;
    req.secrets = session_secrets(o.sandbox.secrets, req.rules.credentials, err);
    req.project = project;
    req.rules = session_rules(project, o, err);
    req.command = o.command;
    req.tty = tty;
    req.sandbox = o.sandbox;
    if (o.ask) req.ask_timeout_ms = ask_timeout_ms(o.ask_timeout);
    const StartedSession started = start_session(
        docker, req, report, [](const std::string& id) { g.session_id = id; },
        [&](const char* step) { test_pause(step, lock); });
    req.secrets.clear();  // the proxy has them; this process keeps none
    const std::string& sandbox = started.sandbox_id;
    auto h = docker.container_attach(sandbox, true, true, true);
    docker.container_start(sandbox);
    set_resize_target(sandbox, false);
    if (tty) {
      enter_raw_mode();
      send_size();
    }
    project_lock.release();
    lock.unlock();
    pump(h, tty, true);
    restore_terminal();
    int status = kRunFailed;
    try {
      status = docker.container_wait(sandbox);
      // Docker answers the killed command's status before the removal that killed it ends.
      if (status == kRunRemoved && removed_from_outside(docker, sandbox)) say_removed(err);
    } catch (const docker::DockerError& e) {
      // Podman's wait fails: the container went while it waited.
      if (removed_from_outside(docker, sandbox)) {
        say_removed(err);
        status = kRunRemoved;
      } else {
        err << "vibepit: " << e.what() << "\n";
      }
    }
    lock.lock();
    bring_back_git_and_say(started.spec.git, started.spec.id, "vibepit", err);
    for (const auto& p : remove_session(docker, started.spec.id))
      err << "vibepit: cleanup: " << p << "\n";
    g.session_id.clear();
    return status;
  } catch (const std::exception& e) {
    restore_terminal();
    err << "vibepit: run: " << e.what() << "\n";
    if (!g.session_id.empty()) {
      try {
        docker::Client c(g.docker);
        for (const auto& p : remove_session(c, g.session_id))
          err << "vibepit: cleanup: " << p << "\n";
      } catch (const std::exception&) {
      }
      g.session_id.clear();
    }
    return kRunFailed;
  }
}

}  // namespace vibepit::launcher
