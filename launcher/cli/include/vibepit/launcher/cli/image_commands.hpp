#pragma once
// `vibepit image build|ls|rm`: the images vibepit builds, found by their label.
#include <ostream>
#include <string>

#include "vibepit/launcher/images/images.hpp"

namespace vibepit::launcher {

struct ImageBuildOptions {
  SandboxImageOptions sandbox = sandbox_options_for_invoker();
  bool quiet = false;
};

int cmd_image_build(const ImageBuildOptions& o, std::ostream& out, std::ostream& err);
int cmd_image_ls(bool json, std::ostream& out, std::ostream& err);
// Remove vibepit's images: the sandbox and proxy images, and with `all` the debootstrap base.
int cmd_image_rm(bool all, std::ostream& out, std::ostream& err);

// The Docker client for DOCKER_HOST, version negotiated. Throws docker::DockerError.
docker::Client connect_docker();

// Connect, run `fn` with the client, and turn any failure into "vibepit: WHAT: message" and
// exit code 4.
template <typename Fn>
int with_docker(const char* what, std::ostream& err, Fn fn) {
  try {
    auto docker = connect_docker();
    return fn(docker);
  } catch (const std::exception& e) {
    err << "vibepit: " << what << ": " << e.what() << "\n";
    return 4;  // kLocalError
  }
}

// A progress reporter in cargo's style: a bold right-aligned verb, then the text. Lines from
// a build's own output are indented under it. Silent when `quiet`.
Report status_reporter(std::ostream& err, bool quiet, bool color);

}  // namespace vibepit::launcher
