#include "vibepit/launcher/run_command.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <mutex>
#include <ostream>
#include <thread>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/image_commands.hpp"
#include "vibepit/launcher/session.hpp"
#include "vibepit/launcher/session_rules.hpp"
#include "vibepit/policy/classify.hpp"
#include "vibepit/proxy/system_resolvers.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using docker::Json;

namespace {

// State the signal watcher shares with the main thread.
struct Shared {
  std::mutex setup;              // held while the main thread changes the session
  std::string session_id;        // non-empty once something may exist to remove
  docker::ClientOptions docker;  // the watcher opens its own connections
  std::mutex resize_mu;          // guards the two below (main sets, the watcher reads)
  std::string resize_target;     // container id, or exec id when `is_exec`
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

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = fd == STDOUT_FILENO || fd == STDERR_FILENO ? ::write(fd, p, n)
                                                                 : ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Copy stdin to the stream (a thread that may stay blocked on read until exit) and the
// stream to stdout/stderr until it ends.
void pump(docker::Hijacked h, bool tty) {
  const int fd = h.fd;
  // The input thread has a descriptor of its own: it may stay blocked on stdin after the
  // output ends, and must never write to a number that this thread has closed (and that
  // may since name another file).
  const int in_fd = ::dup(fd);
  std::thread([in_fd, tty] {
    char b[16384];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, b, sizeof b);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || !write_all(in_fd, b, static_cast<std::size_t>(n))) break;
    }
    if (!tty) ::shutdown(in_fd, SHUT_WR);  // the command sees the end of its input
    ::close(in_fd);
  }).detach();
  docker::StreamDemux demux;
  auto sink = [](docker::StreamDemux::Stream s, std::string_view p) {
    write_all(s == docker::StreamDemux::Stream::stderr_ ? STDERR_FILENO : STDOUT_FILENO, p.data(),
              p.size());
  };
  auto deliver = [&](std::string_view data) {
    if (tty) return write_all(STDOUT_FILENO, data.data(), data.size());
    return demux.feed(data, sink);
  };
  deliver(h.buffered);
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !deliver(std::string_view(buf, static_cast<std::size_t>(n)))) break;
  }
  ::close(fd);
}

void enter_raw_mode() {
  if (::tcgetattr(STDIN_FILENO, &g.saved) != 0) return;
  termios raw = g.saved;
  ::cfmakeraw(&raw);
  if (::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0) g.raw = true;
}

std::string now_rfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
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

int join(docker::Client& docker, const Json& sandbox, const RunOptions& o, bool tty,
         const Report& report) {
  const std::string id = sandbox.value("Id", "");
  const std::string session = sandbox["Labels"].value(docker::label::kSession, "");
  if (report) report("joining session " + session + " (its sandbox is running)");
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
  pump(std::move(h), tty);
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

// The host's resolvers for the proxy: /etc/resolv.conf, or systemd-resolved's upstream list
// when that names only its stub. A loopback resolver (a local dnsmasq, say) is on the
// host's loopback, which the proxy container cannot reach: that is an error that says so.
std::vector<std::string> host_resolvers(const Report& report) {
  auto found = proxy::system_resolvers();
  std::vector<std::string> out;
  for (const auto& ep : found.servers) {
    if (policy::classify_always_blocked(ep.addr).kind == "loopback")
      throw std::runtime_error("the host's resolver " + ep.to_string() + " (from " + found.source +
                               ") is on the host's loopback, which the proxy container cannot "
                               "reach; pass --upstream-dns ADDR with a resolver it can");
    out.push_back(ep.to_string());
  }
  if (report)
    report("using upstream DNS " + proxy::to_string(found.servers) + " (from " + found.source +
           ")");
  return out;
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
  const NetworkFile file = read_network_file(file_path);
  Approvals approvals(state_dir_for(o.sessions_root), project);
  const NetworkFile fresh = approvals.unapproved(file);
  if (!empty(fresh)) {
    err << "vibepit: " << file_path.string() << " has entries you have not approved:\n";
    for (const auto& e : fresh.presets) err << "    + preset " << e << "\n";
    for (const auto& e : fresh.allow_http) err << "    + allow-http " << e << "\n";
    for (const auto& e : fresh.allow_dns) err << "    + allow-dns " << e << "\n";
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

std::int64_t parse_memory(const std::string& text) {
  std::size_t used = 0;
  long double v = 0;
  try {
    v = std::stold(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("memory \"" + text + "\": expected a size such as 4g or 512m");
  }
  std::string unit = text.substr(used);
  long double mult = 1;
  if (unit == "k" || unit == "K")
    mult = 1024;
  else if (unit == "m" || unit == "M")
    mult = 1024.0L * 1024;
  else if (unit == "g" || unit == "G")
    mult = 1024.0L * 1024 * 1024;
  else if (!unit.empty() && unit != "b")
    throw std::invalid_argument("memory \"" + text + "\": unknown unit \"" + unit + "\"");
  const long double bytes = v * mult;
  if (bytes < 6.0L * 1024 * 1024 || bytes > 1e15L)
    throw std::invalid_argument("memory \"" + text + "\": must be between 6m and 1p");
  return static_cast<std::int64_t>(bytes);
}

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
    auto project = resolve_project(o.path, home ? home : "");
    g.docker = docker::Client::options_from_env();
    auto docker = connect_docker();
    // One set-up at a time per project: a second vibepit run waits here, then finds the
    // first one's sandbox running and joins it instead of starting another session.
    ProjectLock project_lock(state_dir_for(o.sessions_root), project);
    if (auto sandbox = running_sandbox(docker, project)) {
      project_lock.release();
      lock.unlock();
      return join(docker, *sandbox, o, tty, report);
    }

    const NetworkFile rules = session_rules(project, o, err);
    SessionSpec spec;
    spec.project = project;
    spec.allow_http = rules.allow_http;
    spec.allow_dns = rules.allow_dns;
    spec.command = o.command;
    spec.tty = tty;
    spec.memory = parse_memory(o.memory);
    spec.cpus = o.cpus;
    spec.upstream_dns = o.upstream_dns.empty() ? host_resolvers(report) : o.upstream_dns;
    spec.egress_network = o.egress_network;
    auto user = sandbox_options_for_invoker();
    spec.uid = ::getuid() == 0 ? user.uid : ::getuid();
    spec.gid = ::getuid() == 0 ? user.gid : ::getgid();

    auto proxy = ensure_proxy_image(docker, find_proxy_binary(), report);
    spec.proxy_image = proxy.tag;
    if (o.image.empty()) {
      spec.sandbox_image = sandbox_image_tag(user.uid, user.gid);
      if (!docker.image_inspect(spec.sandbox_image)) {
        if (report) report("building the default sandbox image (first use)");
        user.no_pull = true;
        spec.sandbox_image = build_sandbox_image(docker, user, report);
      }
    } else {
      spec.sandbox_image = o.image;
      spec.default_image = false;
      if (!docker.image_inspect(o.image))
        throw std::runtime_error("no such image: " + o.image + " (vibepit does not pull it)");
    }

    // 1. The session id and directory.
    spec.id = control::new_session_id();
    const fs::path root =
        o.sessions_root.empty() ? control::default_sessions_root() : o.sessions_root;
    spec.dir = root / spec.id;
    fs::create_directories(spec.dir);
    fs::permissions(spec.dir, fs::perms::owner_all);
    g.session_id = spec.id;
    if (report) report("creating session " + spec.id + " for " + project.root.string());

    // 2. Control credentials, made here; the server's half goes to the proxy on its stdin.
    control::CredentialOptions copts;
    copts.session_id = spec.id;
    auto creds = control::issue_session_credentials(copts);

    Session session(docker, spec, report);
    session.create_networks();  // 3
    test_pause("network", lock);
    const std::string control = session.start_proxy(creds.server_side());  // 4
    test_pause("proxy", lock);
    control::write_client_set(spec.dir, creds.client_side(),
                              {spec.id, control, static_cast<std::int64_t>(::getpid()),
                               now_rfc3339(), project.root.string()});
    const std::string sandbox = session.create_sandbox();  // 5
    test_pause("sandbox", lock);
    auto h = docker.container_attach(sandbox, true, true, true);
    docker.container_start(sandbox);
    set_resize_target(sandbox, false);
    if (tty) {
      enter_raw_mode();
      send_size();
    }
    project_lock.release();
    lock.unlock();
    pump(std::move(h), tty);
    restore_terminal();
    int status = kRunFailed;
    try {
      status = docker.container_wait(sandbox);
    } catch (const docker::DockerError& e) {
      err << "vibepit: " << e.what() << "\n";
    }
    lock.lock();
    for (const auto& p : remove_session(docker, spec.id)) err << "vibepit: cleanup: " << p << "\n";
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
