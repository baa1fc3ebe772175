#pragma once
// The two images a session needs, built locally (no registry is assumed):
// - the proxy image, FROM scratch: the vibepit-proxy binary, exactly the shared objects the
//   dynamic loader names for it, a non-root numeric user, no shell. Tagged by the content
//   hash of all of those files, so a rebuilt binary gets a new image and an unchanged one
//   reuses it;
// - the sandbox image (container/sandbox/Dockerfile), per invoking UID/GID.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/docker/client.hpp"

namespace vibepit::launcher {

// A progress line for the user ("building proxy image vibepit-proxy:3f2a...").
using Report = std::function<void(std::string_view)>;

// The UID:GID the proxy runs as when the invoking user is root.
inline constexpr unsigned kProxyUid = 65532;

// Image labels: every image vibepit builds has dev.vibepit.image=<kind>.
inline constexpr const char* kImageLabel = "dev.vibepit.image";

// The vibepit-proxy to put in the image: $VIBEPIT_PROXY_BINARY, else the one next to the
// running vibepit. Throws std::runtime_error saying where it looked.
std::filesystem::path find_proxy_binary();

// The shared objects the dynamic loader maps for `binary` (ldd's list, the loader itself
// included, the vDSO left out), as absolute paths. Throws when ldd fails.
std::vector<std::filesystem::path> shared_objects(const std::filesystem::path& binary);

struct ProxyImage {
  std::string tag;  // vibepit-proxy:<first 16 hex digits of the SHA-256 of every file>
  bool built = false;
  std::int64_t size = 0;  // bytes, as the daemon reports it
};

// The proxy image for `binary`: inspected, and built when missing.
ProxyImage ensure_proxy_image(docker::Client& docker, const std::filesystem::path& binary,
                              const Report& report);

struct SandboxImageOptions {
  uid_t uid = 1000;  // the invoking user's (1000 when that is root)
  gid_t gid = 1000;
  // auto: debian:bookworm-slim when present (or pullable, unless no_pull), else debootstrap.
  enum class Base { automatic, slim, debootstrap } base = Base::automatic;
  bool no_pull = false;
  std::string mirror = "http://deb.debian.org/debian";
  std::filesystem::path work_dir;  // debootstrap's target lives under here
};

// The default sandbox user for the invoking user: its UID/GID, or 1000:1000 for root.
SandboxImageOptions sandbox_options_for_invoker();

// The default image's tag for a user: vibepit-sandbox:<definition hash>-<uid>-<gid>.
std::string sandbox_image_tag(uid_t uid, gid_t gid);

// Build the default sandbox image; returns its tag. Reports each step and the build's output.
std::string build_sandbox_image(docker::Client& docker, const SandboxImageOptions& opts,
                                const Report& report);

// Test-only: with VIBEPIT_TEST_LABEL=V set, everything vibepit creates also carries
// dev.vibepit.test=V, so a test run can remove exactly what it made. Returns `labels`.
docker::Labels with_test_label(docker::Labels labels);

}  // namespace vibepit::launcher
