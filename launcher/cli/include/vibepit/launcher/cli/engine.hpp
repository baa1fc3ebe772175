#pragma once
// What the commands that talk to the container engine share: the connection, the one line
// and exit code for a failure, and the progress lines of a build or a session's start.
#include <exception>
#include <ostream>

#include "vibepit/docker/client.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"
#include "vibepit/launcher/images/images.hpp"

namespace vibepit::launcher {

// The client for the engine DOCKER_HOST names, or else the first of Docker's and Podman's
// sockets that answers (docker::engine_sockets), version negotiated. Throws
// docker::DockerError.
docker::Client connect_engine();

// Connect, run `fn` with the client, and turn any failure into "vibepit: WHAT: message" and
// exit code 4.
template <typename Fn>
int with_docker(const char* what, std::ostream& err, Fn fn) {
  try {
    auto docker = connect_engine();
    return fn(docker);
  } catch (const std::exception& e) {
    err << "vibepit: " << what << ": " << e.what() << "\n";
    return kLocalError;
  }
}

// A progress reporter in cargo's style: a bold right-aligned verb, then the text. Lines from
// a build's own output are indented under it. Silent when `quiet`.
Report status_reporter(std::ostream& err, bool quiet, bool color);

}  // namespace vibepit::launcher
