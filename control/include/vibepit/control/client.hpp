#pragma once
// The control API's client, used by the CLI: one mutual-TLS connection per call, pinned to
// the session CA, with a deadline on every step, to host:port or to a unix socket
// (session.json's control "unix:PATH").
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "vibepit/control/session_dir.hpp"

namespace vibepit::control {

// The proxy could not be reached, refused the handshake, or stopped answering in time.
class ConnectError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HttpResult {
  int status = 0;
  std::string body;
};

class ControlClient {
 public:
  explicit ControlClient(StoredSession session,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

  HttpResult get(const std::string& target);
  HttpResult post_json(const std::string& target, const std::string& body);
  // PUT `body` as raw bytes (a credential's value: this process's copies are wiped once sent).
  HttpResult put(const std::string& target, std::string_view body);
  HttpResult remove(const std::string& target);  // DELETE
  // GET a chunked NDJSON stream and hand each line to `on_line` until it returns false or
  // the server ends the stream. Quiet periods longer than `idle` are an error.
  void stream_lines(const std::string& target, const std::function<bool(std::string_view)>& on_line,
                    std::chrono::milliseconds idle = std::chrono::seconds(30));

  const StoredSession& session() const { return session_; }

 private:
  HttpResult call(const std::string& method, const std::string& target, const std::string* body);

  StoredSession session_;
  std::string host_;
  std::uint16_t port_ = 0;
  std::string socket_path_;  // "unix:PATH" in session.json: the control socket
  std::chrono::milliseconds timeout_;
};

}  // namespace vibepit::control
