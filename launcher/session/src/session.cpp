#include "vibepit/launcher/session/session.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <tuple>

#include "beside.hpp"
#include "ca_bundles.hpp"
#include "vibepit/control/session_dir.hpp"
#include "vibepit/docker/wire.hpp"
#include "vibepit/launcher/guard/project_guard.hpp"
#include "vibepit/launcher/host/owned_fd.hpp"
#include "vibepit/launcher/session/agent_user.hpp"
#include "vibepit/launcher/session/bridge_rule.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;
using docker::Json;

namespace {

constexpr const char* kInhibitIpv4 = "com.docker.network.bridge.inhibit_ipv4";
constexpr const char* kProxyConfigInContainer = "/etc/vibepit/proxy.json";
constexpr const char* kLogDirInContainer = "/var/log/vibepit";
// The control API's unix socket, in a directory of the session's own (no port is published:
// the launcher connects to the socket's host side, SESSION_DIR/control/control.sock).
constexpr const char* kControlDirInContainer = "/run/vibepit";
constexpr const char* kControlSocketName = "control.sock";

// The open-files and process limits of a session's containers, at most what this host gives
// vibepit: the proxy raises its soft open-files limit to the hard one, and the processes
// are bounded by PidsLimit already (RLIMIT_NPROC counts the uid's processes host-wide; 2^15
// leaves the user's own room). Set, because engines differ when they are not: Docker
// passes on its own limits, Podman asks for 2^20 files and 2^22 processes, which a host that
// denies the engine CAP_SYS_RESOURCE refuses.
Json session_ulimits() {
  Json out = Json::array();
  for (const auto& [name, resource, cap] : {std::tuple{"nofile", RLIMIT_NOFILE, rlim_t{1} << 20},
                                            std::tuple{"nproc", RLIMIT_NPROC, rlim_t{1} << 15}}) {
    rlimit rl{};
    rlim_t n = cap;
    if (::getrlimit(resource, &rl) == 0 && rl.rlim_max < n) n = rl.rlim_max;
    const auto v = static_cast<std::int64_t>(n);
    out.push_back({{"Name", name}, {"Soft", v}, {"Hard", v}});
  }
  return out;
}

void write_public_file(const fs::path& p, const std::string& text) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o << text;
  o.close();
  if (!o) throw std::runtime_error("cannot write " + p.string());
  fs::permissions(p, fs::perms(0644));
}

// An address as a one-address block-cidr entry ("A/32", "B/128"); "" when it is not one.
std::string host_range(const std::string& text) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1) return text + "/32";
  if (::inet_pton(AF_INET6, text.c_str(), &a6) == 1) return text + "/128";
  return {};
}

// What the engine's networks hold: their subnets, which a new session network must not
// overlap, and their gateways, the engine host's own addresses on its bridges. Those are the
// host's even when this launcher runs somewhere else (in a container, or beside a remote or
// rootless engine) and cannot see them among its own interfaces.
struct EngineNetworks {
  std::vector<Subnet4> subnets;
  std::vector<std::string> host_ranges;
};

EngineNetworks engine_networks(docker::Client& docker) {
  EngineNetworks out;
  for (const auto& n : docker.get("/networks")) {
    if (!n.contains("IPAM") || !n["IPAM"].contains("Config") || !n["IPAM"]["Config"].is_array())
      continue;
    for (const auto& c : n["IPAM"]["Config"]) {
      if (!c.is_object()) continue;
      if (auto s = parse_subnet4(c.value("Subnet", ""))) out.subnets.push_back(*s);
      if (auto r = host_range(c.value("Gateway", "")); !r.empty()) out.host_ranges.push_back(r);
    }
  }
  // A swarm node's own address, when the engine is one.
  if (!docker.traits().may_be_swarm_node) return out;
  const auto info = docker.get("/info");
  if (info.contains("Swarm") && info["Swarm"].is_object())
    if (auto r = host_range(info["Swarm"].value("NodeAddr", "")); !r.empty())
      out.host_ranges.push_back(r);
  return out;
}

// Close the write side, then read the proxy's multiplexed output until it says "ready:",
// exits, or the deadline passes. Returns "" when ready, else what it printed.
std::string wait_ready(int fd, const std::string& buffered, std::chrono::seconds deadline) {
  docker::StreamDemux demux;
  std::string text;
  auto sink = [&](docker::StreamDemux::Stream, std::string_view p) { text.append(p); };
  demux.feed(buffered, sink);
  const auto until = std::chrono::steady_clock::now() + deadline;
  char buf[8192];
  while (text.find("ready:") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return "no \"ready\" from the proxy within " + std::to_string(deadline.count()) + " s:\n" +
             text;
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text.empty() ? "the proxy exited without a word" : text;
    if (!demux.feed(std::string_view(buf, static_cast<std::size_t>(n)), sink))
      return "unreadable output from the proxy container";
  }
  return {};
}

}  // namespace

Session::Session(docker::Client& docker, SessionSpec spec, Report report)
    : docker_(docker), spec_(std::move(spec)), report_(std::move(report)) {}

docker::Labels Session::labels(const std::string& role) const {
  return with_test_label({{docker::label::kSession, spec_.id},
                          {docker::label::kProject, spec_.project.hash},
                          {docker::label::kRole, role}});
}

void Session::create_networks() {
  auto pool = parse_subnet4(spec_.subnet_pool);
  if (!pool) throw std::runtime_error("subnet pool " + spec_.subnet_pool + ": not an IPv4 CIDR");
  std::vector<Subnet4> taken = host_routes();
  const EngineNetworks engine = engine_networks(docker_);
  for (const auto& s : engine.subnets) taken.push_back(s);
  engine_host_ranges_ = engine.host_ranges;
  // The engine host's own addresses, read from the engine's network namespace: they are
  // not among this process's interfaces when vibepit runs in a namespace of its own, and a
  // rootless engine's egress (slirp4netns) reaches every one of them.
  for (auto& r : address_ranges_of(docker_.engine_pid())) engine_host_ranges_.push_back(r);
  const std::uint64_t seed = std::stoull(spec_.id.substr(0, 8), nullptr, 16);

  // The two networks are made at once (the engine takes its time over each bridge), each
  // by a client of its own. A subnet is taken as it is chosen, so the two never pick the
  // same one; Docker may still refuse one it holds in a pool we cannot see: try a few.
  std::mutex taken_mu;
  auto create = [&](docker::Client& client, const std::string& name, bool internal,
                    Subnet4& chosen) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::optional<Subnet4> s;
      {
        std::lock_guard lock(taken_mu);
        s = choose_subnet(*pool, 28, taken, seed + static_cast<std::uint64_t>(attempt) * 7919);
        if (s) taken.push_back(*s);
      }
      if (!s) throw std::runtime_error("no free /28 left in the subnet pool " + spec_.subnet_pool);
      Json body = {{"Name", name},
                   {"CheckDuplicate", true},
                   {"Driver", "bridge"},
                   {"Internal", internal},
                   {"EnableIPv6", false},
                   {"IPAM", {{"Driver", "default"}, {"Config", {{{"Subnet", s->cidr()}}}}}},
                   {"Labels", labels("network")}};
      // The session network: no address on the host's side of the bridge, so the sandbox
      // cannot reach services the host runs (an internal network alone still lets it).
      if (internal) body["Options"] = {{kInhibitIpv4, "true"}};
      try {
        auto id = client.network_create(body);
        chosen = *s;
        return id;
      } catch (const docker::DockerError& e) {
        // Docker: "Pool overlaps with other one on this address space"; Podman: "subnet S
        // is already used on the host or by another config".
        const std::string why = e.what();
        if (why.find("overlap") == std::string::npos &&
            why.find("already used") == std::string::npos)
          throw;
      }
    }
    throw std::runtime_error("Docker refused every subnet tried for " + name);
  };
  // The egress network's own, on a thread of its own; joined before this returns or throws.
  Subnet4 egress_subnet;
  std::optional<Beside> egress;
  if (spec_.egress_network.empty())
    egress.emplace(docker_, [&](docker::Client& client) {
      egress_net_ = create(client, "vibepit-" + spec_.id + "-egress", false, egress_subnet);
    });

  Subnet4 session_subnet;
  session_net_ = create(docker_, "vibepit-" + spec_.id, true, session_subnet);
  proxy_ip_ = session_subnet.host(2);
  sandbox_ip_ = session_subnet.host(3);
  if (report_)
    report_("creating network vibepit-" + spec_.id + " " + session_subnet.cidr() + " (internal)");
  if (docker_.traits().internal_bridge_needs_forward_rule && !docker_.version().rootless) {
    const std::string bridge = docker_.network_bridge(session_net_);
    if (::geteuid() == 0) {
      add_bridge_rule(bridge, spec_.id);
      if (report_) report_("allowing traffic within " + bridge + " only (a FORWARD rule)");
    } else if (report_) {
      report_("cannot allow traffic within " + bridge + " (not root): on a host whose FORWARD " +
              "policy is DROP the sandbox cannot reach the proxy");
    }
  }

  if (egress) {
    egress->join();
    proxy_egress_ip_ = egress_subnet.host(2);
    if (report_)
      report_("creating network vibepit-" + spec_.id + "-egress " + egress_subnet.cidr());
    return;
  }
  auto net = docker_.network_inspect(spec_.egress_network);
  if (!net)
    throw std::runtime_error("egress network " + spec_.egress_network + ": no such network");
  egress_net_ = net->value("Id", spec_.egress_network);
  std::optional<Subnet4> s;
  if ((*net)["IPAM"]["Config"].is_array() && !(*net)["IPAM"]["Config"].empty())
    s = parse_subnet4((*net)["IPAM"]["Config"][0].value("Subnet", ""));
  if (!s)
    throw std::runtime_error("egress network " + spec_.egress_network + " has no IPv4 subnet");
  // Containers take addresses from the network's IP range when it has one (the rest of
  // the subnet may hold hosts the engine does not know).
  Subnet4 pick_from = *s;
  if (auto r = parse_subnet4((*net)["IPAM"]["Config"][0].value("IPRange", ""));
      r && r->prefix >= s->prefix && r->prefix <= 30)
    pick_from = *r;
  std::vector<std::string> used;
  if (net->contains("Containers") && (*net)["Containers"].is_object())
    for (const auto& [k, c] : (*net)["Containers"].items()) {
      std::string a = c.value("IPv4Address", "");
      used.push_back(a.substr(0, a.find('/')));
    }
  const std::string gateway = (*net)["IPAM"]["Config"][0].value("Gateway", s->host(1));
  // From a place the session id picks, not the first free one: a previous session's proxy
  // on this shared network may still be being torn down (Podman cleans up after a
  // container asynchronously), and its teardown would take the port forward of a new
  // proxy at the same address with it.
  const std::uint32_t hosts = (1u << (32 - pick_from.prefix)) - 2;  // not the first or last
  for (std::uint32_t k = 0; k < hosts; ++k) {
    const std::string a = pick_from.host(1 + static_cast<std::uint32_t>((seed + k) % hosts));
    if (a != gateway && std::find(used.begin(), used.end(), a) == used.end()) {
      proxy_egress_ip_ = a;
      break;
    }
  }
  if (proxy_egress_ip_.empty()) throw std::runtime_error("egress network is full");
}

std::vector<std::string> Session::block_ranges() const {
  std::vector<std::string> out = host_address_ranges();
  out.insert(out.end(), engine_host_ranges_.begin(), engine_host_ranges_.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Session::proxy_config() const {
  Json cfg = {
      {"proxy-listen", {proxy_ip_ + ":" + std::to_string(kProxyPort)}},
      {"dns-listen", {proxy_ip_ + ":53"}},
      {"control-socket", std::string(kControlDirInContainer) + "/" + kControlSocketName},
      {"allow-http", spec_.allow_http},
      {"allow-dns", spec_.allow_dns},
      {"mode", policy::to_string(spec_.mode)},
      {"block-cidr", block_ranges()},
      {"decision-log", std::string(kLogDirInContainer) + "/decisions.ndjson"},
      {"threads", 1},
  };
  // TLS inspection: the CA's certificate for the launcher to read, and what upstreams are
  // trusted by (the proxy's image has no CA store of its own).
  cfg["inspect-ca-cert-out"] = std::string(kControlDirInContainer) + "/" + kInspectCaName;
  if (upstream_cas()) cfg["upstream-ca-file"] = kProxyUpstreamCa;
  if (!spec_.upstream_dns.empty()) cfg["upstream-dns"] = spec_.upstream_dns;
  if (spec_.ask_timeout_ms != 0) {
    cfg["ask"] = true;
    cfg["ask-timeout-ms"] = spec_.ask_timeout_ms;
  }
  if (spec_.decision_ring != 0) cfg["decision-ring"] = spec_.decision_ring;
  if (spec_.decision_log_max_bytes != 0)
    cfg["decision-log-max-bytes"] = spec_.decision_log_max_bytes;
  return cfg.dump(2) + "\n";
}

std::string Session::control_address() const {
  return "unix:" + (spec_.dir / "control" / kControlSocketName).string();
}

void Session::start_proxy(const control::PeerCredentials& server,
                          const std::vector<SessionSecret>& secrets) {
  const auto started = std::chrono::steady_clock::now();
  const bool root = ::getuid() == 0;
  const unsigned uid = root ? kProxyUid : spec_.uid;
  const unsigned gid = root ? kProxyUid : spec_.gid;
  write_public_file(spec_.dir / "proxy.json", proxy_config());
  const fs::path log_dir = spec_.dir / "log";
  fs::create_directories(log_dir);
  if (root && ::chown(log_dir.c_str(), uid, gid) != 0)
    throw std::runtime_error("cannot hand " + log_dir.string() + " to the proxy's user");
  fs::permissions(log_dir, fs::perms(0700));
  const fs::path control_dir = spec_.dir / "control";
  fs::create_directories(control_dir);
  if (root && ::chown(control_dir.c_str(), uid, gid) != 0)
    throw std::runtime_error("cannot hand " + control_dir.string() + " to the proxy's user");
  fs::permissions(control_dir, fs::perms(0700));

  Json binds = {(spec_.dir / "proxy.json").string() + ":" + kProxyConfigInContainer + ":ro",
                log_dir.string() + ":" + kLogDirInContainer + ":rw",
                control_dir.string() + ":" + kControlDirInContainer + ":rw"};
  if (upstream_cas())
    binds.push_back((spec_.dir / kUpstreamCaFile).string() + ":" + kProxyUpstreamCa + ":ro");
  Json spec = {
      {"Image", spec_.proxy_image},
      {"Cmd", {"-c", kProxyConfigInContainer, "--credentials-fd", "0", "--session-id", spec_.id}},
      {"User", std::to_string(uid) + ":" + std::to_string(gid)},
      {"OpenStdin", true},
      {"StdinOnce", true},
      {"AttachStdin", true},
      {"AttachStdout", true},
      {"AttachStderr", true},
      {"Labels", labels("proxy")},
      {"HostConfig",
       {{"NetworkMode", egress_net_},
        {"ReadonlyRootfs", true},
        {"CapDrop", {"ALL"}},
        {"SecurityOpt", {"no-new-privileges"}},
        {"PidsLimit", 64},
        {"Ulimits", session_ulimits()},
        {"Memory", 512LL << 20},
        {"MemorySwap", 512LL << 20},
        // Port 53 without CAP_NET_BIND_SERVICE: the sysctl is per network namespace.
        {"Sysctls", {{"net.ipv4.ip_unprivileged_port_start", "53"}}},
        {"Binds", binds},
        {"LogConfig",
         {{"Type", "json-file"}, {"Config", {{"max-size", "10m"}, {"max-file", "2"}}}}}}},
      {"NetworkingConfig",
       {{"EndpointsConfig",
         {{egress_net_, {{"IPAMConfig", {{"IPv4Address", proxy_egress_ip_}}}}}}}}},
  };
  // Docker's embedded DNS (127.0.0.11, which a process in the sandbox can still query)
  // answers container names on the session network. A random suffix the sandbox is never
  // told keeps the proxy's name out of its reach.
  if (const char* userns = rootless_userns(docker_)) spec["HostConfig"]["UsernsMode"] = userns;
  proxy_id_ =
      docker_.container_create(spec, "vibepit-" + spec_.id + "-proxy-" + control::new_session_id() +
                                         control::new_session_id());
  docker_.network_connect(session_net_, proxy_id_, {{"IPAMConfig", {{"IPv4Address", proxy_ip_}}}});
  if (report_)
    report_("starting proxy " + proxy_ip_ + " (dns :53, http :" + std::to_string(kProxyPort) + ")");

  auto h = docker_.container_attach(proxy_id_, true, true, true);
  const OwnedFd attached{h.fd};
  docker_.container_start(proxy_id_);
  // The start-up channel: the control server's credentials and the secrets' values, in
  // memory that is wiped when this returns.
  const auto channel = startup_channel(server, secrets);
  const std::string_view creds = channel->reveal();
  for (std::size_t off = 0; off < creds.size();) {
    const ssize_t n = ::send(h.fd, creds.data() + off, creds.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("the proxy container closed its stdin");
    off += static_cast<std::size_t>(n);
  }
  ::shutdown(h.fd, SHUT_WR);
  if (auto problem = wait_ready(h.fd, h.buffered, std::chrono::seconds(20)); !problem.empty())
    throw std::runtime_error("the proxy did not start: " + problem);
  complete_sandbox_bundle();  // before the sandbox starts: its mount reads the file then
  if (report_) {
    char took[32];
    std::snprintf(
        took, sizeof took, "%.2f",
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    report_(std::string("started proxy in ") + took + " s (its container made, started, ready)");
  }
}

std::vector<std::string> Session::sandbox_env() const {
  const std::string url = "http://" + proxy_ip_ + ":" + std::to_string(kProxyPort);
  const std::string port = std::to_string(kProxyPort);
  return {"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url,
          "NO_PROXY=localhost,127.0.0.1", "no_proxy=localhost,127.0.0.1",
          // npm and yarn read their own settings; Node 24+ honours HTTP(S)_PROXY with this.
          "npm_config_proxy=" + url, "npm_config_https_proxy=" + url, "NODE_USE_ENV_PROXY=1",
          "GLOBAL_AGENT_HTTP_PROXY=" + url,
          // pip and git read HTTPS_PROXY/http_proxy above; the JVM needs system properties.
          "JAVA_TOOL_OPTIONS=-Dhttp.proxyHost=" + proxy_ip_ + " -Dhttp.proxyPort=" + port +
              " -Dhttps.proxyHost=" + proxy_ip_ + " -Dhttps.proxyPort=" + port +
              " -Dhttp.nonProxyHosts=localhost|127.0.0.1",
          "VIBEPIT_SESSION=" + spec_.id, "VIBEPIT_PROXY=" + url};
}

std::vector<std::string> Session::placeholder_env() const {
  std::vector<std::string> out;
  for (const auto& name : spec_.secret_names) out.push_back(name + "=" + placeholder(name));
  return out;
}

std::string Session::create_sandbox(docker::Client& engine) {
  const std::string home = home_volume(engine);
  write_public_file(spec_.dir / "resolv.conf", "nameserver " + proxy_ip_ + "\noptions edns0\n");
  const std::string project = spec_.project.root.string();
  const std::string home_dir = spec_.default_image ? "/home/code" : "/home/vibepit";
  Json env = sandbox_env();
  env.push_back("HOME=" + home_dir);
  for (auto& v : ca_bundle_env(kSandboxCaBundle)) env.push_back(std::move(v));
  for (auto& v : placeholder_env()) env.push_back(std::move(v));
  Json spec = {
      {"Image", spec_.sandbox_image},
      {"Env", env},
      {"WorkingDir", project},
      {"Tty", spec_.tty},
      {"OpenStdin", spec_.stdin_open},
      {"StdinOnce", spec_.stdin_open},
      {"AttachStdin", spec_.stdin_open},
      {"AttachStdout", true},
      {"AttachStderr", true},
      {"Hostname", "vibepit"},
      {"Labels", labels("sandbox")},
      {"HostConfig",
       {{"NetworkMode", session_net_},
        {"ReadonlyRootfs", true},
        {"CapDrop", {"ALL"}},
        {"SecurityOpt", {"no-new-privileges"}},
        {"Init", true},
        {"PidsLimit", 1024},
        {"Ulimits", session_ulimits()},
        {"Memory", spec_.memory},
        {"MemorySwap", spec_.memory},
        {"Dns", {proxy_ip_}},
        // No IPv6 at all: the session network has none, and no link-local address or router
        // advertisement on another path may give the agent a way around the proxy.
        {"Sysctls",
         {{"net.ipv6.conf.all.disable_ipv6", "1"}, {"net.ipv6.conf.default.disable_ipv6", "1"}}},
        {"Tmpfs", {{"/tmp", "rw,nosuid,nodev,size=1g"}}},
        {"Mounts",
         {{{"Type", "bind"},
           {"Source", spec_.project_view.empty() ? project : spec_.project_view.string()},
           {"Target", project}},
          {{"Type", "volume"}, {"Source", home}, {"Target", home_dir}},
          {{"Type", "bind"},
           {"Source", (spec_.dir / "resolv.conf").string()},
           {"Target", "/etc/resolv.conf"},
           {"ReadOnly", true}},
          {{"Type", "bind"},
           {"Source", (spec_.dir / kSandboxCaFile).string()},
           {"Target", kSandboxCaBundle},
           {"ReadOnly", true}}}}}},
      {"NetworkingConfig",
       {{"EndpointsConfig", {{session_net_, {{"IPAMConfig", {{"IPv4Address", sandbox_ip_}}}}}}}}},
  };
  for (auto& m : git_mounts(spec_.git)) spec["HostConfig"]["Mounts"].push_back(std::move(m));
  if (spec_.cpus > 0) spec["HostConfig"]["NanoCpus"] = static_cast<std::int64_t>(spec_.cpus * 1e9);
  if (!spec_.command.empty()) spec["Cmd"] = spec_.command;
  if (!spec_.default_image)
    spec["User"] = std::to_string(spec_.uid) + ":" + std::to_string(spec_.gid);
  if (const char* userns = rootless_userns(engine)) spec["HostConfig"]["UsernsMode"] = userns;
  sandbox_id_ = engine.container_create(spec, "vibepit-" + spec_.id + "-sandbox");
  if (report_) report_("creating sandbox " + spec_.sandbox_image + " (" + sandbox_ip_ + ")");
  return sandbox_id_;
}

fs::path decision_log_path(const fs::path& session_dir) {
  return session_dir / "log" / "decisions.ndjson";
}

}  // namespace vibepit::launcher
