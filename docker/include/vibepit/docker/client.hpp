#pragma once
// The Docker Engine API client: the operations vibepit needs, spoken as API 1.41 over the
// engine's Unix socket, to Docker or to Podman's compatible service (what differs between
// them is in EngineTraits). Errors are DockerError with the engine's own message.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vibepit/docker/connection.hpp"
#include "vibepit/docker/error.hpp"
#include "vibepit/docker/wire.hpp"

namespace vibepit::docker {

using Labels = std::map<std::string, std::string>;
using Json = nlohmann::json;

struct ClientOptions {
  std::string socket_path = kDefaultSocket;
  std::chrono::milliseconds timeout{30'000};        // connect and each read/write
  std::chrono::milliseconds slow_timeout{600'000};  // between messages of a build/import
};

// What differs between the engines that serve Docker's API, in one place: the launcher asks
// these rather than which engine it talks to.
struct EngineTraits {
  // The prefix of the names of images built or imported locally. Podman keeps them under
  // localhost/, and its Docker API takes a short name for one on docker.io.
  const char* local_image_prefix;
  // An internal network is made with the engine's own API. Podman's Docker API gives every
  // bridge a host address and a DNS server on it (aardvark-dns, which forwards to the
  // host's resolvers), a way to the host and out; its own API makes one with neither.
  bool internal_network_via_libpod;
  // Traffic between two containers on one internal bridge needs a FORWARD rule on the host
  // when the engine runs as root: Podman (netavark 1.4) adds none for an internal network,
  // so a host whose FORWARD policy is DROP (dockerd sets it) drops it. Docker adds its own.
  bool internal_bridge_needs_forward_rule;
  // A rootless engine maps the containers' users onto its user's subordinate ids; this
  // HostConfig.UsernsMode maps the engine's own user to itself instead, so that what a
  // container writes as that uid belongs to the user on the host ("" where the engine has
  // no such mode: rootless Docker).
  const char* rootless_userns_keeping_ids;
  // The engine may be a swarm node, whose own address only /info tells. Podman has no swarm,
  // and its /info takes a third of a second (it asks conmon and the OCI runtime for their
  // versions), so a session start does not ask it.
  bool may_be_swarm_node;
};
const EngineTraits& traits_of(EngineKind kind);

// Receives each progress message of a build or import as it arrives.
using ProgressFn = std::function<void(const Progress&)>;
// Produces the next piece of a streamed request body into `out`; false when done.
using SourceFn = std::function<bool(std::string& out)>;

struct VersionInfo {
  EngineKind engine = EngineKind::docker;  // from /_ping's Server header (or /version)
  std::string version;                     // "20.10.24+dfsg1", "4.3.1"
  std::string api_version;                 // the engine's newest API
  std::string min_api_version;             // its oldest, when /version was asked
  ApiVersion negotiated;                   // what this client speaks to it
  std::string socket;                      // where it answered
  bool rootless = false;    // its socket is not root's: the engine runs as a user, its
                            // networks in a namespace of their own, not the host's
  unsigned socket_uid = 0;  // who owns the socket: the user a rootless engine runs as
};

class Client {
 public:
  explicit Client(ClientOptions opts = {});
  // A client for the first of `sockets` whose engine answers, version negotiated. Throws
  // DockerError(unavailable) naming every socket and why it failed when none answers, and
  // the first other error (an engine too old, say) as it is.
  static Client connect_first(const std::vector<std::string>& sockets, ClientOptions base = {});
  // connect_first over engine_sockets(DOCKER_HOST, XDG_RUNTIME_DIR).
  static Client connect_from_env();

  // GET /_ping (and /version when its headers do not say); sets the API version every later
  // call uses. Throws DockerError(unsupported) for an engine older than API 1.41, naming
  // its version.
  VersionInfo negotiate();
  const ApiVersion& api() const { return api_; }
  // What the last negotiate() found.
  const VersionInfo& version() const { return version_; }
  const EngineTraits& traits() const { return traits_of(version_.engine); }
  // `name` (repo:tag) as this engine names an image built or imported here.
  std::string local_image(const std::string& name) const {
    return traits().local_image_prefix + name;
  }

  // --- Generic requests (paths without the /vX.Y prefix) -----------------------------
  // JSON in, JSON out; a status >= 400 (or 304 where `ok_304` is false) throws DockerError.
  Json get(const std::string& path, std::optional<std::chrono::milliseconds> timeout = {});
  Json post(const std::string& path, const Json& body = nullptr,
            std::optional<std::chrono::milliseconds> timeout = {});
  void del(const std::string& path, std::optional<std::chrono::milliseconds> timeout = {});
  // GET, with 404 as nullopt: inspecting something that may not exist.
  std::optional<Json> get_if_exists(const std::string& path);

  // --- Images -----------------------------------------------------------------------
  std::optional<Json> image_inspect(const std::string& name);  // nullopt: no such image
  // Build from an in-memory tar context (Dockerfile at its root); returns the image id.
  // RUN steps get `network_mode` ("none" unless the build must fetch packages; "" for the
  // daemon's default).
  std::string image_build(const std::string& context_tar, const std::string& tag,
                          const Labels& labels, const ProgressFn& progress,
                          const std::map<std::string, std::string>& build_args = {},
                          const std::string& network_mode = "none");
  // Import a root filesystem tar streamed from `source` as repo:tag, with Dockerfile
  // `changes` (e.g. "LABEL a=b", "CMD [\"bash\"]"); returns the image id.
  std::string image_import(const SourceFn& source, const std::string& repo, const std::string& tag,
                           const std::vector<std::string>& changes, const ProgressFn& progress);
  // Pull `image` (name:tag); throws DockerError when the registry cannot be reached.
  void image_pull(const std::string& image, const ProgressFn& progress);
  void image_remove(const std::string& name, bool force = false);
  std::vector<Json> images_by_label(const std::string& label);  // "key" or "key=value"

  // --- Networks and volumes -----------------------------------------------------------
  // Docker's network spec; an internal one as traits() says. Returns the id.
  std::string network_create(const Json& spec);
  std::optional<Json> network_inspect(const std::string& id);
  // The host interface of a bridge network: Podman's network_interface, Docker's bridge
  // name option or br-<id>.
  std::string network_bridge(const std::string& id);
  void network_connect(const std::string& network, const std::string& container,
                       const Json& endpoint_config = nullptr);
  void network_remove(const std::string& id);
  std::vector<Json> networks_by_label(const std::string& label);
  Json volume_create(const Json& spec);
  std::optional<Json> volume_inspect(const std::string& name);
  std::vector<Json> volumes_by_label(const std::string& label);
  void volume_remove(const std::string& name);

  // --- Containers ---------------------------------------------------------------------
  std::string container_create(const Json& spec, const std::string& name = {});
  void container_start(const std::string& id);  // already running is not an error
  // POST /containers/{id}/attach with the stream upgraded: the caller owns the result.
  Hijacked container_attach(const std::string& id, bool stdin_, bool stdout_, bool stderr_,
                            bool logs = false);
  void container_resize(const std::string& id, unsigned rows, unsigned cols);
  // Block until the container is not running; returns its exit status. No deadline.
  int container_wait(const std::string& id, const std::string& condition = "not-running");
  void container_kill(const std::string& id, const std::string& signal = "KILL");
  void container_stop(const std::string& id, int grace_seconds);
  void container_remove(const std::string& id, bool force = true);  // and its anonymous volumes
  std::optional<Json> container_inspect(const std::string& id);
  std::vector<Json> containers_by_label(const std::string& label, bool all = true);
  // The container's log stream (stdout and stderr, multiplexed when it has no TTY), handed
  // to `sink` piece by piece.
  void container_logs(const std::string& id, bool follow, std::size_t tail,
                      const std::function<void(std::string_view)>& sink);

  // --- Exec -------------------------------------------------------------------------------
  std::string exec_create(const std::string& container, const Json& spec);
  Hijacked exec_start(const std::string& exec_id, bool tty);
  void exec_resize(const std::string& exec_id, unsigned rows, unsigned cols);
  Json exec_inspect(const std::string& exec_id);

  const ClientOptions& options() const { return opts_; }
  // The process that serves the socket (SO_PEERCRED), as this process's PID namespace sees
  // it; 0 when it cannot be told (another PID namespace, no answer).
  pid_t engine_pid() const;

 private:
  std::string prefixed(const std::string& path) const;
  std::unique_ptr<Connection> open(std::chrono::milliseconds timeout) const;
  // Send a request with a JSON (or no) body; read the head; throw on an error status
  // (reading the error body). Returns the open connection for the body.
  std::unique_ptr<Connection> send(const std::string& method, const std::string& path,
                                   const Json& body, std::chrono::milliseconds timeout,
                                   Response& head, bool ok_304 = false);
  [[noreturn]] void throw_for(Connection& c, const Response& head) const;
  std::string progress_stream(Connection& c, const ProgressFn& progress);

  ClientOptions opts_;
  ApiVersion api_ = kPreferredApi;
  VersionInfo version_;
};

// The labels vibepit puts on what it creates, and the label selectors built from them.
namespace label {
inline constexpr const char* kSession = "dev.vibepit.session";
inline constexpr const char* kProject = "dev.vibepit.project";
inline constexpr const char* kRole = "dev.vibepit.role";
}  // namespace label

}  // namespace vibepit::docker
