#include "vibepit/docker/client.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace vibepit::docker {
namespace {

std::string q(const std::string& v) {
  return url_encode(v);
}

std::vector<Json> as_list(const Json& j) {
  std::vector<Json> out;
  if (j.is_array())
    for (const auto& e : j) out.push_back(e);
  return out;
}

std::string label_filter(const std::string& label) {
  return encode_filters({{"label", {label}}});
}

const std::vector<Header> kUpgrade = {{"Connection", "Upgrade"}, {"Upgrade", "tcp"}};

}  // namespace

const EngineTraits& traits_of(EngineKind kind) {
  static constexpr EngineTraits kDocker{"", false, false, "", true};
  static constexpr EngineTraits kPodman{"localhost/", true, true, "keep-id", false};
  return kind == EngineKind::podman ? kPodman : kDocker;
}

Client::Client(ClientOptions opts) : opts_(std::move(opts)) {}

pid_t Client::engine_pid() const {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  pid_t pid = 0;
  if (opts_.socket_path.size() < sizeof addr.sun_path) {
    std::memcpy(addr.sun_path, opts_.socket_path.c_str(), opts_.socket_path.size() + 1);
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      pid = cred.pid;
  }
  ::close(fd);
  return pid;
}

Client Client::connect_first(const std::vector<std::string>& sockets, ClientOptions base) {
  std::string tried;
  for (const auto& path : sockets) {
    base.socket_path = path;
    Client c(base);
    try {
      c.negotiate();
      return c;
    } catch (const DockerError& e) {
      if (e.kind() != ErrorKind::unavailable) throw;
      tried += std::string("\n  ") + e.what();
    }
  }
  throw DockerError(ErrorKind::unavailable,
                    "no container engine answered:" + tried +
                        "\nStart Docker (`systemctl start docker`) or Podman's API service "
                        "(`systemctl start podman.socket`; rootless: `systemctl --user start "
                        "podman.socket`), or name its socket in DOCKER_HOST=unix:///PATH");
}

Client Client::connect_from_env() {
  return connect_first(engine_sockets(std::getenv("DOCKER_HOST"), std::getenv("XDG_RUNTIME_DIR")));
}

std::string Client::prefixed(const std::string& path) const {
  // Podman's own API, where its Docker API falls short, is spoken as Podman 4.0's (Debian 12
  // ships 4.3).
  if (path.rfind("/libpod/", 0) == 0) return "/v4.0.0" + path;
  return "/v" + api_.to_string() + path;
}

std::unique_ptr<Connection> Client::open(std::chrono::milliseconds timeout) const {
  return std::make_unique<Connection>(opts_.socket_path, timeout);
}

void Client::throw_for(Connection& c, const Response& head) const {
  std::string body;
  try {
    body = c.read_body_all(1 << 20);
  } catch (const DockerError&) {
    // The status alone still says what happened.
  }
  throw DockerError(kind_for_status(head.status), daemon_error_message(head.status, body),
                    head.status);
}

std::unique_ptr<Connection> Client::send(const std::string& method, const std::string& path,
                                         const Json& body, std::chrono::milliseconds timeout,
                                         Response& head, bool ok_304) {
  auto c = open(timeout);
  if (body.is_null()) {
    c->write_head(method, prefixed(path), {},
                  method == "POST" ? std::optional<std::uint64_t>(0) : std::nullopt);
  } else {
    const std::string text = body.dump();
    c->write_head(method, prefixed(path), {{"Content-Type", "application/json"}}, text.size());
    c->write(text);
  }
  head = c->read_head(method);
  if (head.status >= 400 || (head.status == 304 && !ok_304)) throw_for(*c, head);
  return c;
}

VersionInfo Client::negotiate() {
  VersionInfo v;
  {
    auto c = open(opts_.timeout);
    c->write_head("GET", "/_ping", {}, std::nullopt);
    auto head = c->read_head("GET");
    auto body = c->read_body_all(4096);
    if (head.status != 200)
      throw DockerError(kind_for_status(head.status),
                        "the container engine's /_ping answered HTTP " +
                            std::to_string(head.status) + ": " +
                            daemon_error_message(head.status, body),
                        head.status);
    // The ping's headers say what /version would, and /version costs Podman half a second
    // (it asks conmon and the OCI runtime for their versions): Api-Version, and Server
    // "Docker/20.10.24+dfsg1 (linux)" or "Libpod/4.3.1 (linux)".
    v.api_version = head.find("Api-Version").value_or("");
    const std::string server = head.find("Server").value_or("");
    for (const auto& [prefix, kind] :
         {std::pair{"Docker/", EngineKind::docker}, {"Libpod/", EngineKind::podman}})
      if (server.rfind(prefix, 0) == 0) {
        v.engine = kind;
        v.version = server.substr(std::string_view(prefix).size());
        v.version = v.version.substr(0, v.version.find(' '));
      }
  }
  if (v.api_version.empty() || v.version.empty()) {
    auto c = open(opts_.timeout);
    c->write_head("GET", "/version", {}, std::nullopt);
    auto head = c->read_head("GET");
    if (head.status != 200) throw_for(*c, head);
    auto j = Json::parse(c->read_body_all(1 << 20), nullptr, false);
    if (!j.is_object()) throw DockerError(ErrorKind::protocol, "/version did not answer JSON");
    v.version = j.value("Version", "");
    v.api_version = j.value("ApiVersion", "");
    v.min_api_version = j.value("MinAPIVersion", "");
    if (const auto it = j.find("Components"); it != j.end() && it->is_array())
      for (const auto& comp : *it)
        if (comp.is_object() && comp.value("Name", "") == "Podman Engine")
          v.engine = EngineKind::podman;
  }
  v.socket = opts_.socket_path;
  // A rootless engine runs as its user, who made its socket; a rootful one's is root's.
  struct stat st {};
  if (::stat(opts_.socket_path.c_str(), &st) == 0) {
    v.socket_uid = st.st_uid;
    v.rootless = st.st_uid != 0;
  }
  v.negotiated = negotiate_api(v.api_version, v.min_api_version);
  api_ = v.negotiated;
  version_ = v;
  return v;
}

Json Client::get(const std::string& path, std::optional<std::chrono::milliseconds> timeout) {
  Response head;
  auto c = send("GET", path, nullptr, timeout.value_or(opts_.timeout), head);
  auto text = c->read_body_all();
  if (text.empty()) return nullptr;
  auto j = Json::parse(text, nullptr, false);
  if (j.is_discarded())
    throw DockerError(ErrorKind::protocol, "GET " + path + " did not answer JSON");
  return j;
}

Json Client::post(const std::string& path, const Json& body,
                  std::optional<std::chrono::milliseconds> timeout) {
  Response head;
  auto c = send("POST", path, body, timeout.value_or(opts_.timeout), head, true);
  auto text = c->read_body_all();
  if (text.empty()) return nullptr;
  auto j = Json::parse(text, nullptr, false);
  return j.is_discarded() ? Json(text) : j;
}

void Client::del(const std::string& path, std::optional<std::chrono::milliseconds> timeout) {
  Response head;
  auto c = send("DELETE", path, nullptr, timeout.value_or(opts_.timeout), head);
  c->read_body_all();
}

std::string Client::progress_stream(Connection& c, const ProgressFn& progress) {
  LineSplitter lines;
  std::string last_id, error, piece;
  auto on_line = [&](std::string_view line) {
    auto p = parse_progress(line);
    if (!p) return;
    if (!p->error.empty() && error.empty()) error = p->error;
    if (!p->id.empty()) last_id = p->id;
    if (progress) progress(*p);
  };
  while (c.read_body(piece)) {
    if (!lines.feed(piece, on_line))
      throw DockerError(ErrorKind::protocol, "a progress message longer than 1 MiB");
    piece.clear();
  }
  if (auto rest = lines.take_rest(); !rest.empty()) on_line(rest);
  if (!error.empty()) throw DockerError(ErrorKind::server, error);
  return last_id;
}

std::optional<Json> Client::get_if_exists(const std::string& path) {
  try {
    return get(path);
  } catch (const DockerError& e) {
    if (e.kind() == ErrorKind::not_found) return std::nullopt;
    throw;
  }
}

std::optional<Json> Client::image_inspect(const std::string& name) {
  return get_if_exists("/images/" + q(name) + "/json");
}

std::string Client::image_build(const std::string& context_tar, const std::string& tag,
                                const Labels& labels, const ProgressFn& progress,
                                const std::map<std::string, std::string>& build_args,
                                const std::string& network_mode) {
  std::string path = "/build?t=" + q(tag) + "&rm=1&forcerm=1";
  if (!network_mode.empty()) path += "&networkmode=" + q(network_mode);
  if (!labels.empty()) path += "&labels=" + q(Json(labels).dump());
  if (!build_args.empty()) path += "&buildargs=" + q(Json(build_args).dump());
  auto c = open(opts_.slow_timeout);
  c->write_head("POST", prefixed(path), {{"Content-Type", "application/x-tar"}},
                context_tar.size());
  c->write(context_tar);
  auto head = c->read_head("POST");
  if (head.status >= 400) throw_for(*c, head);
  return progress_stream(*c, progress);
}

std::string Client::image_import(const SourceFn& source, const std::string& repo,
                                 const std::string& tag, const std::vector<std::string>& changes,
                                 const ProgressFn& progress) {
  std::string path = "/images/create?fromSrc=-&repo=" + q(repo) + "&tag=" + q(tag);
  for (const auto& ch : changes) path += "&changes=" + q(ch);
  auto c = open(opts_.slow_timeout);
  c->write_head("POST", prefixed(path), {{"Content-Type", "application/x-tar"}}, std::nullopt,
                true);
  std::string piece;
  while (source(piece)) {
    if (!piece.empty()) c->write_chunk(piece);
    piece.clear();
  }
  c->write_chunk({});
  auto head = c->read_head("POST");
  if (head.status >= 400) throw_for(*c, head);
  // The answer's status line is the new image's id. Podman's import ignores `tag` (naming the
  // image REPO:latest), so the image is tagged again by that id, which both engines take.
  std::string id;
  auto id_and_progress = [&](const Progress& p) {
    if (p.text.rfind("sha256:", 0) == 0) id = p.text;
    if (progress) progress(p);
  };
  progress_stream(*c, id_and_progress);
  if (id.empty()) throw DockerError(ErrorKind::protocol, "the import answered no image id");
  post("/images/" + q(id) + "/tag?repo=" + q(repo) + "&tag=" + q(tag));
  // ... and Podman's REPO:latest name is taken off again when it is this image's.
  if (tag != "latest")
    if (auto latest = image_inspect(repo + ":latest"); latest && latest->value("Id", "") == id)
      del("/images/" + q(repo + ":latest"));
  return id;
}

void Client::image_pull(const std::string& image, const ProgressFn& progress) {
  std::string name = image, tag = "latest";
  if (auto colon = image.rfind(':');
      colon != std::string::npos && image.find('/', colon) == std::string::npos) {
    name = image.substr(0, colon);
    tag = image.substr(colon + 1);
  }
  Response head;
  auto c = send("POST", "/images/create?fromImage=" + q(name) + "&tag=" + q(tag), nullptr,
                opts_.slow_timeout, head);
  progress_stream(*c, progress);
}

void Client::image_remove(const std::string& name, bool force) {
  del("/images/" + q(name) + (force ? "?force=1" : ""));
}

std::vector<Json> Client::images_by_label(const std::string& label) {
  return as_list(get("/images/json?filters=" + label_filter(label)));
}

std::string Client::network_create(const Json& spec) {
  if (traits().internal_network_via_libpod && spec.value("Internal", false)) {
    Json body = {{"name", spec.value("Name", "")},
                 {"driver", "bridge"},
                 {"internal", true},
                 {"dns_enabled", false},
                 {"ipv6_enabled", false},
                 {"subnets", Json::array()},
                 {"labels", spec.value("Labels", Json::object())}};
    if (const auto* ipam = spec.contains("IPAM") ? &spec["IPAM"] : nullptr;
        ipam != nullptr && ipam->contains("Config") && (*ipam)["Config"].is_array())
      for (const auto& c : (*ipam)["Config"])
        body["subnets"].push_back({{"subnet", c.value("Subnet", "")}});
    return post("/libpod/networks/create", body).value("id", "");
  }
  auto j = post("/networks/create", spec);
  return j.value("Id", "");
}

std::optional<Json> Client::network_inspect(const std::string& id) {
  return get_if_exists("/networks/" + q(id));
}

std::string Client::network_bridge(const std::string& id) {
  if (version_.engine == EngineKind::podman)
    return get("/libpod/networks/" + q(id) + "/json").value("network_interface", "");
  const auto net = network_inspect(id);
  if (!net) throw DockerError(ErrorKind::not_found, "no such network: " + id);
  if (const auto it = net->find("Options"); it != net->end() && it->is_object())
    if (auto name = it->value("com.docker.network.bridge.name", ""); !name.empty()) return name;
  return "br-" + net->value("Id", id).substr(0, 12);
}

void Client::network_connect(const std::string& network, const std::string& container,
                             const Json& endpoint_config) {
  Json body = {{"Container", container}};
  if (!endpoint_config.is_null()) body["EndpointConfig"] = endpoint_config;
  post("/networks/" + q(network) + "/connect", body);
}

void Client::network_remove(const std::string& id) {
  del("/networks/" + q(id));
}

std::vector<Json> Client::networks_by_label(const std::string& label) {
  return as_list(get("/networks?filters=" + label_filter(label)));
}

Json Client::volume_create(const Json& spec) {
  return post("/volumes/create", spec);
}

std::optional<Json> Client::volume_inspect(const std::string& name) {
  return get_if_exists("/volumes/" + q(name));
}

std::vector<Json> Client::volumes_by_label(const std::string& label) {
  auto j = get("/volumes?filters=" + label_filter(label));
  return j.is_object() && j.contains("Volumes") ? as_list(j["Volumes"]) : std::vector<Json>{};
}

void Client::volume_remove(const std::string& name) {
  del("/volumes/" + q(name));
}

std::string Client::container_create(const Json& spec, const std::string& name) {
  auto j = post("/containers/create" + (name.empty() ? std::string() : "?name=" + q(name)), spec);
  return j.value("Id", "");
}

void Client::container_start(const std::string& id) {
  post("/containers/" + q(id) + "/start");  // 304: already started
}

Hijacked Client::container_attach(const std::string& id, bool stdin_, bool stdout_, bool stderr_,
                                  bool logs) {
  std::string path = "/containers/" + q(id) + "/attach?stream=1";
  if (stdin_) path += "&stdin=1";
  if (stdout_) path += "&stdout=1";
  if (stderr_) path += "&stderr=1";
  if (logs) path += "&logs=1";
  auto c = open(opts_.timeout);
  c->write_head("POST", prefixed(path), kUpgrade, 0);
  auto head = c->read_head("POST");
  if (head.status >= 400) throw_for(*c, head);
  if (head.status != 101 && head.status != 200)
    throw DockerError(ErrorKind::protocol, "attach answered HTTP " + std::to_string(head.status),
                      head.status);
  return c->hijack();
}

void Client::container_resize(const std::string& id, unsigned rows, unsigned cols) {
  post("/containers/" + q(id) + "/resize?h=" + std::to_string(rows) + "&w=" + std::to_string(cols));
}

int Client::container_wait(const std::string& id, const std::string& condition) {
  auto j = post("/containers/" + q(id) + "/wait?condition=" + q(condition), nullptr,
                std::chrono::milliseconds(0));
  if (j.is_object() && j.contains("Error") && j["Error"].is_object()) {
    auto msg = j["Error"].value("Message", "");
    if (!msg.empty()) throw DockerError(ErrorKind::server, msg);
  }
  return j.is_object() ? j.value("StatusCode", -1) : -1;
}

void Client::container_kill(const std::string& id, const std::string& signal) {
  post("/containers/" + q(id) + "/kill?signal=" + q(signal));
}

void Client::container_stop(const std::string& id, int grace_seconds) {
  post("/containers/" + q(id) + "/stop?t=" + std::to_string(grace_seconds), nullptr,
       opts_.timeout + std::chrono::seconds(grace_seconds));
}

void Client::container_remove(const std::string& id, bool force) {
  del("/containers/" + q(id) + "?v=1" + (force ? "&force=1" : ""));
}

std::optional<Json> Client::container_inspect(const std::string& id) {
  return get_if_exists("/containers/" + q(id) + "/json");
}

std::vector<Json> Client::containers_by_label(const std::string& label, bool all) {
  return as_list(get("/containers/json?" + std::string(all ? "all=1&" : "") +
                     "filters=" + label_filter(label)));
}

void Client::container_logs(const std::string& id, bool follow, std::size_t tail,
                            const std::function<void(std::string_view)>& sink) {
  Response head;
  auto c = send("GET",
                "/containers/" + q(id) + "/logs?stdout=1&stderr=1&tail=" + std::to_string(tail) +
                    (follow ? "&follow=1" : ""),
                nullptr, follow ? std::chrono::milliseconds(0) : opts_.timeout, head);
  std::string piece;
  while (c->read_body(piece)) {
    sink(piece);
    piece.clear();
  }
}

std::string Client::exec_create(const std::string& container, const Json& spec) {
  auto j = post("/containers/" + q(container) + "/exec", spec);
  return j.value("Id", "");
}

Hijacked Client::exec_start(const std::string& exec_id, bool tty) {
  const std::string body = Json{{"Detach", false}, {"Tty", tty}}.dump();
  auto c = open(opts_.timeout);
  auto headers = kUpgrade;
  headers.emplace_back("Content-Type", "application/json");
  c->write_head("POST", prefixed("/exec/" + q(exec_id) + "/start"), headers, body.size());
  c->write(body);
  auto head = c->read_head("POST");
  if (head.status >= 400) throw_for(*c, head);
  if (head.status != 101 && head.status != 200)
    throw DockerError(ErrorKind::protocol,
                      "exec start answered HTTP " + std::to_string(head.status), head.status);
  return c->hijack();
}

void Client::exec_resize(const std::string& exec_id, unsigned rows, unsigned cols) {
  post("/exec/" + q(exec_id) + "/resize?h=" + std::to_string(rows) + "&w=" + std::to_string(cols));
}

Json Client::exec_inspect(const std::string& exec_id) {
  return get("/exec/" + q(exec_id) + "/json");
}

}  // namespace vibepit::docker
