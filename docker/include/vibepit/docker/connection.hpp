#pragma once
// One HTTP/1.1 exchange with the Docker daemon over its Unix socket. Blocking calls, each
// bounded by a deadline, run on a private io_context; bodies are read piece by piece so a
// long build or log stream never sits in memory whole.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>

#include "vibepit/http/body.hpp"

namespace vibepit::docker {

using Header = std::pair<std::string, std::string>;

struct Response {
  int status = 0;
  std::vector<Header> headers;
  std::string body;  // filled by Connection::read_body_all only
  std::optional<std::string> find(std::string_view name) const;
};

// What is left of a connection once the daemon has switched protocols (attach, exec start):
// the socket's descriptor (blocking), now owned by the caller, and any stream bytes already
// read.
struct Hijacked {
  int fd = -1;
  std::string buffered;
};

class Connection {
 public:
  // Connects to `socket_path` within `timeout`; throws DockerError(unavailable) saying why.
  // A zero timeout means no deadline (waiting on a container's exit).
  Connection(const std::string& socket_path, std::chrono::milliseconds timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Request head. With `content_length` set the body follows with write(); without it and
  // `chunked` true, with write_chunk(); otherwise there is no body.
  void write_head(std::string_view method, std::string_view target,
                  const std::vector<Header>& headers, std::optional<std::uint64_t> content_length,
                  bool chunked = false);
  void write(std::string_view data);
  void write_chunk(std::string_view data);  // an empty piece ends the body

  // Read the response head (`method` decides whether a body may follow).
  Response read_head(std::string_view method);
  // Append the next piece of the decoded body to `piece`; false once the body has ended.
  bool read_body(std::string& piece);
  // The whole body, refusing more than `limit` bytes (small JSON answers).
  std::string read_body_all(std::size_t limit = 16u << 20);
  // Give up the connection after a 101 (or an attach 200): see Hijacked.
  Hijacked hijack();

 private:
  std::size_t fill();  // read more into buf_; 0 at EOF
  [[noreturn]] void fail_protocol(const std::string& what);

  asio::io_context io_;
  asio::local::stream_protocol::socket sock_;
  std::string path_;
  std::chrono::milliseconds timeout_;
  std::string buf_;
  http::Framing framing_;
  std::uint64_t left_ = 0;
  http::ChunkedDecoder chunked_;
  bool body_done_ = true;
  bool eof_ = false;
};

}  // namespace vibepit::docker
