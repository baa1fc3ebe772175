// Session start-up shared by `vibepit run` and `vibepit ci`, and the attached stream.
#include "vibepit/launcher/session/session_start.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

#include "beside.hpp"
#include "vibepit/config/system_resolvers.hpp"
#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/policy/classify.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;

namespace {

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

}  // namespace

std::string now_rfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

void pump(const docker::Hijacked& h, bool tty, bool forward_stdin) {
  const int fd = h.fd;
  if (forward_stdin) {
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
  }
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

double default_cpus() {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 1 ? static_cast<double>(n - 1) : 1.0;
}

void apply_test_settings(SandboxSettings& s) {
  auto number = [](const char* name) -> std::uint64_t {
    const char* v = std::getenv(name);
    return v && *v ? std::stoull(v) : 0;
  };
  if (const char* egress = std::getenv("VIBEPIT_TEST_EGRESS_NETWORK")) s.egress_network = egress;
  s.test_decision_ring = number("VIBEPIT_TEST_DECISION_RING");
  s.test_log_max_bytes = number("VIBEPIT_TEST_DECISION_LOG_MAX_BYTES");
}

std::vector<std::string> host_resolvers(const Report& report) {
  auto found = config::system_resolvers();
  std::vector<std::string> out;
  for (const auto& ep : found.servers) {
    if (policy::classify_always_blocked(ep.addr).kind == "loopback")
      throw std::runtime_error("the host's resolver " + ep.to_string() + " (from " + found.source +
                               ") is on the host's loopback, which the proxy container cannot "
                               "reach; pass --upstream-dns ADDR with a resolver it can");
    out.push_back(ep.to_string());
  }
  if (report)
    report("using upstream DNS " + config::to_string(found.servers) + " (from " + found.source +
           ")");
  return out;
}

StartedSession start_session(docker::Client& docker, const SessionRequest& req,
                             const Report& report,
                             const std::function<void(const std::string&)>& on_id,
                             const std::function<void(const char*)>& after_step) {
  // Who the agent is, decided first: a refusal leaves nothing behind.
  const AgentUser agent =
      choose_agent_user(agent_user_facts(req.project.root.string(), req.sandbox.user));
  check_engine_keeps_ids(docker.version(), docker.traits(), agent);
  const fs::path root =
      fs::absolute(req.sandbox.sessions_root.empty() ? control::default_sessions_root()
                                                     : req.sandbox.sessions_root);
  if (docker.version().rootless)
    if (const auto m = private_mount_holding(root); !m.empty())
      throw std::runtime_error(
          "rootless " + std::string(docker::to_string(docker.version().engine)) +
          " runs in a mount namespace of its own, and sees the project's filter, mounted in " +
          root.string() + ", only when that is under a shared mount; it is under " + m +
          ", which is private (as in a container without systemd, which makes / shared at "
          "boot). Make it shared (`sudo mount --make-rshared " +
          m +
          "`) then restart Podman (`podman system migrate` stops its containers and the process "
          "that "
          "keeps that namespace)");
  if (docker.version().rootless && report) {
    // Podman: "Resource limits are not supported and ignored on cgroups V1 rootless systems"
    const auto info = docker.get("/info");
    if (info.is_object() && info.value("CgroupVersion", "") == "1")
      report(
          "this rootless engine runs on cgroup v1, where it cannot limit a container: the "
          "sandbox's memory, CPU and process limits are not enforced (cgroup v2 with "
          "delegation, as systemd sets it up, enforces them)");
  }
  SessionSpec spec;
  spec.project = req.project;
  spec.allow_http = req.rules.allow_http;
  spec.allow_dns = req.rules.allow_dns;
  spec.mode = req.mode;
  spec.ask_timeout_ms = req.ask_timeout_ms;
  spec.command = req.command;
  spec.tty = req.tty;
  spec.stdin_open = req.stdin_open;
  spec.memory = parse_memory(req.sandbox.memory);
  spec.cpus = req.sandbox.cpus < 0 ? default_cpus() : req.sandbox.cpus;
  spec.upstream_dns =
      req.sandbox.upstream_dns.empty() ? host_resolvers(report) : req.sandbox.upstream_dns;
  spec.upstream_ca = req.sandbox.upstream_ca;
  for (const auto& s : req.secrets) spec.secret_names.push_back(s.spec.name);
  spec.egress_network = req.sandbox.egress_network;
  spec.home = req.home;
  spec.home_cache_key = req.home_cache_key;
  spec.decision_ring = req.sandbox.test_decision_ring;
  spec.decision_log_max_bytes = req.sandbox.test_log_max_bytes;
  SandboxImageOptions user;
  user.uid = spec.uid = agent.uid;
  user.gid = spec.gid = agent.gid;

  auto proxy = ensure_proxy_image(docker, find_proxy_binary(), report);
  spec.proxy_image = proxy.tag;
  if (req.sandbox.image.empty()) {
    spec.sandbox_image = docker.local_image(sandbox_image_tag(user.uid, user.gid));
    if (!docker.image_inspect(spec.sandbox_image)) {
      if (report) report("building the default sandbox image (first use)");
      user.no_pull = true;
      spec.sandbox_image = build_sandbox_image(docker, user, report);
    }
  } else {
    spec.sandbox_image = req.sandbox.image;
    spec.default_image = false;
    if (!docker.image_inspect(req.sandbox.image))
      throw std::runtime_error("no such image: " + req.sandbox.image +
                               " (vibepit does not pull it)");
  }

  // 1. The session id and directory.
  spec.id = control::new_session_id();
  spec.dir = root / spec.id;
  fs::create_directories(spec.dir);
  fs::permissions(spec.dir, fs::perms::owner_all);
  on_id(spec.id);
  if (report) report("creating session " + spec.id + " for " + req.project.root.string());
  // The sandbox gets a copy of the project's .git, never the project's own.
  spec.git = shield_git(req.project.root, spec.dir, spec.uid, spec.gid);
  if (report && spec.git.kind == GitShieldState::Kind::hidden)
    report("the project's .git is hidden from the sandbox (it gets an empty one): " +
           spec.git.why_hidden);

  // 2. Control credentials, made here; the server's half goes to the proxy on its stdin.
  control::CredentialOptions copts;
  copts.session_id = spec.id;
  auto creds = control::issue_session_credentials(copts);

  StartedSession out;
  // Two threads report below (the proxy's and the sandbox's side): one line at a time.
  std::mutex report_mu;
  Report said;
  if (report)
    said = [&](std::string_view line) {
      std::lock_guard lock(report_mu);
      report(line);
    };
  Session session(docker, spec, said);
  session.create_networks();  // 3
  session.prepare_ca_bundles();
  after_step("network");
  // The client set names this launcher before anything else of the session runs, so that
  // `vibepit prune` leaves the session alone; the control socket appears once the proxy is
  // ready.
  out.control = session.control_address();
  control::write_client_set(spec.dir, creds.client_side(),
                            {spec.id, out.control, static_cast<std::int64_t>(::getpid()),
                             now_rfc3339(), req.project.root.string()});
  // 4. The proxy starts while the sandbox is made beside it, by a client of its own: the
  // project's filter (the sandbox sees the project through it, a view that refuses git
  // repositories), the home volume, the container. The sandbox is only created here; it
  // starts after this returns, so nothing in it runs before its only way out is ready.
  Beside sandbox_side(docker, [&](docker::Client& engine) {
    session.set_project_view(
        start_project_guard(req.project.root, spec.dir, spec.id, spec.uid, spec.gid));
    out.sandbox_id = session.create_sandbox(engine);
  });
  session.start_proxy(creds.server_side(),
                      req.secrets);  // when it fails, its error is the one told
  sandbox_side.join();
  after_step("proxy");
  out.proxy_id = session.proxy_id();
  after_step("sandbox");  // 5
  out.spec = session.spec();
  return out;
}

}  // namespace vibepit::launcher
