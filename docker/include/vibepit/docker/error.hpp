#pragma once
// Errors from the Docker Engine API: the daemon's own message, with a kind to branch on.
#include <stdexcept>
#include <string>

namespace vibepit::docker {

enum class ErrorKind {
  bad_request,   // 400: the daemon refused the parameters
  forbidden,     // 403
  not_found,     // 404: no such image, container, network, volume or exec
  conflict,      // 409: the name is in use, the container is running, ...
  not_modified,  // 304: already started or stopped
  server,        // 500 and other statuses the daemon uses for its own failures
  unavailable,   // the socket cannot be reached: no daemon, no permission
  protocol,      // the daemon's answer could not be read as HTTP or JSON
  timeout,       // a deadline passed while waiting for the daemon
  unsupported,   // a DOCKER_HOST scheme or API version this client does not speak
};

const char* to_string(ErrorKind kind);
ErrorKind kind_for_status(int status);

class DockerError : public std::runtime_error {
 public:
  // what() is the message as the user should see it: the daemon's words when it gave some.
  DockerError(ErrorKind kind, const std::string& message, int status = 0)
      : std::runtime_error(message), kind_(kind), status_(status) {}
  ErrorKind kind() const { return kind_; }
  int status() const { return status_; }  // the HTTP status, or 0 when there was none

 private:
  ErrorKind kind_;
  int status_;
};

}  // namespace vibepit::docker
