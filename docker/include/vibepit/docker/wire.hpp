#pragma once
// The pure parts of the Docker Engine API client: where the socket is, API versions, the
// multiplexed attach stream, progress-message lines, query encoding. No sockets here, so
// each piece is unit tested and fuzzed on its own.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::docker {

inline constexpr const char* kDefaultSocket = "/var/run/docker.sock";
inline constexpr const char* kPodmanRootfulSocket = "/run/podman/podman.sock";

// The socket path named by a DOCKER_HOST value: unset or empty gives the default socket,
// "unix:///path" gives "/path". Any other scheme (tcp://, ssh://, fd://, npipe://) throws
// DockerError(unsupported) naming the value.
std::string socket_path_from_docker_host(const char* docker_host);

// The engines that serve Docker's API: Docker itself, and Podman's compatible service.
enum class EngineKind { docker, podman };
const char* to_string(EngineKind kind);  // "docker", "podman"

// Where to look for an engine, in order, as the docker CLI looks and then some: DOCKER_HOST's
// socket alone when it is set (and not empty); otherwise Docker's default socket, rootful
// Podman's (/run/podman/podman.sock), then the user's rootless Podman's
// ($XDG_RUNTIME_DIR/podman/podman.sock, when that names an absolute directory).
std::vector<std::string> engine_sockets(const char* docker_host, const char* xdg_runtime_dir);

struct ApiVersion {
  int major = 0;
  int minor = 0;
  // clang-tidy 14 takes the 0 a defaulted <=> compares with for a null pointer.
  auto operator<=>(const ApiVersion&) const = default;  // NOLINT(modernize-use-nullptr)
  std::string to_string() const;                        // "1.41"
};
inline constexpr ApiVersion kMinimumApi{1, 41};
std::optional<ApiVersion> parse_api_version(std::string_view text);

// The version to speak to a daemon that reports `server` (its ApiVersion) and `server_min`
// (its MinAPIVersion): kPreferredApi, the version this client is written against, or the
// daemon's own when that is older. Throws DockerError(unsupported) naming the daemon's
// version when it is older than kMinimumApi, or when it no longer speaks kPreferredApi.
inline constexpr ApiVersion kPreferredApi{1, 41};
ApiVersion negotiate_api(std::string_view server, std::string_view server_min);

// The message in a daemon error body ({"message": "..."}), or the body's text.
std::string daemon_error_message(int status, std::string_view body);

// Percent-encoding for a query value (RFC 3986 unreserved characters stay).
std::string url_encode(std::string_view text);
// The `filters` query value: {"label":["a=b"]} as URL-encoded JSON.
std::string encode_filters(const std::map<std::string, std::vector<std::string>>& filters);

// The attach/logs stream of a container without a TTY: 8-byte frame headers
// {stream, 0, 0, 0, size (big-endian 32-bit)} followed by that many bytes. Frames are
// handed out in pieces as they arrive, so memory stays bounded whatever a frame's size.
class StreamDemux {
 public:
  enum class Stream : std::uint8_t { stdin_ = 0, stdout_ = 1, stderr_ = 2 };
  using Sink = std::function<void(Stream, std::string_view)>;

  // Feed received bytes; calls `sink` for every piece of payload. Returns false (and stays
  // failed) on a header that names no stream or has non-zero padding.
  bool feed(std::string_view data, const Sink& sink);
  bool failed() const { return failed_; }
  bool at_frame_boundary() const { return header_len_ == 0 && remaining_ == 0; }

 private:
  unsigned char header_[8] = {};
  std::size_t header_len_ = 0;
  std::uint32_t remaining_ = 0;
  Stream stream_ = Stream::stdout_;
  bool failed_ = false;
};

// Splits the daemon's progress stream (JSON messages one per line, as /build, /images/create
// and /images/load send them) into lines. A line longer than max_line fails the stream.
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 1 << 20) : max_line_(max_line) {}
  // Calls `line` for each complete line (without its newline). False when a line is too long.
  bool feed(std::string_view data, const std::function<void(std::string_view)>& line);
  // What is left after the last newline (a final line without one), then cleared.
  std::string take_rest();

 private:
  std::string partial_;
  std::size_t max_line_;
};

// One progress message of /build or /images/create, reduced to what a user reads.
struct Progress {
  std::string text;   // "Step 2/4 : COPY ...", "Downloading 12.3MB/40MB", a status line
  std::string error;  // non-empty: the operation failed with this message
  std::string id;     // aux.ID of a finished build ("sha256:..."), or the status id
};
// Parse one line of the stream; nullopt for a line that is not a JSON object.
std::optional<Progress> parse_progress(std::string_view line);

}  // namespace vibepit::docker
