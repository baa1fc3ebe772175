#pragma once
// A scripted Docker daemon on a Unix socket: each connection's request is read whole
// (Content-Length or chunked body) and recorded, then the next scripted answer is written.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "vibepit/http/body.hpp"
#include "vibepit/http/head.hpp"

namespace vibepit::docker::test {

struct SeenRequest {
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (http::iequals(k, name)) return v;
    return {};
  }
};

// An answer: the raw bytes to write, then whether to keep the connection open afterwards
// (and for how long), for tests of deadlines and hijacked streams.
struct Answer {
  explicit Answer(std::string r = {}, int hold = 0, std::function<void(int)> then = nullptr)
      : raw(std::move(r)), hold_ms(hold), after(std::move(then)) {}
  std::string raw;
  int hold_ms = 0;
  std::function<void(int fd)> after;  // runs on the connection after `raw` is written
};

class FakeDaemon {
 public:
  FakeDaemon() {
    dir_ = std::filesystem::temp_directory_path() /
           ("vp-fake-docker-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "docker.sock").string();
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 16) != 0)
      throw std::runtime_error("fake daemon: bind " + path_);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeDaemon() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    std::filesystem::remove_all(dir_);
  }
  const std::string& path() const { return path_; }

  void answer(Answer a) {
    std::lock_guard lock(mu_);
    answers_.push_back(std::move(a));
  }
  void answer(int status, const std::string& json_body, const std::string& extra = {}) {
    answer(Answer{"HTTP/1.1 " + std::to_string(status) +
                  " X\r\nContent-Type: application/json\r\n" + extra +
                  "Content-Length: " + std::to_string(json_body.size()) + "\r\n\r\n" + json_body});
  }
  static std::string chunked(const std::vector<std::string>& pieces) {
    std::string out;
    char size[32];
    for (const auto& p : pieces) {
      std::snprintf(size, sizeof size, "%zx\r\n", p.size());
      out += size + p + "\r\n";
    }
    return out + "0\r\n\r\n";
  }
  void answer_chunked(int status, const std::vector<std::string>& pieces) {
    answer(Answer{"HTTP/1.1 " + std::to_string(status) +
                  " X\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(pieces)});
  }
  std::vector<SeenRequest> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  void serve() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      handle(c);
      ::close(c);
    }
  }
  void handle(int c) {
    std::string buf;
    char tmp[65536];
    http::RequestHead head;
    for (;;) {
      auto r = http::parse_request_head(buf, 1 << 16, head);
      if (r.state == http::ParseState::complete) break;
      if (r.state == http::ParseState::error) return;
      ssize_t n = ::read(c, tmp, sizeof tmp);
      if (n <= 0) return;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
    SeenRequest req{std::string(head.method), std::string(head.target), {}, {}};
    for (const auto& h : head.headers) req.headers.emplace_back(h.name, h.value);
    auto framing = std::get<http::Framing>(http::request_framing(head));
    buf.erase(0, head.head_size);
    http::ChunkedDecoder dec;
    for (;;) {
      if (framing.kind == http::BodyKind::length) {
        if (buf.size() >= framing.length) {
          req.body = buf.substr(0, framing.length);
          break;
        }
      } else if (framing.kind == http::BodyKind::chunked) {
        auto step = dec.feed(buf, req.body);
        buf.erase(0, step.consumed);
        if (step.status != http::ChunkedDecoder::Status::need_more) break;
      } else {
        break;
      }
      ssize_t n = ::read(c, tmp, sizeof tmp);
      if (n <= 0) break;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
    Answer a;
    {
      std::lock_guard lock(mu_);
      seen_.push_back(req);
      if (answers_.empty()) {
        a.raw = "HTTP/1.1 500 X\r\nContent-Length: 27\r\n\r\n{\"message\":\"not scripted\"}\n";
      } else {
        a = std::move(answers_.front());
        answers_.pop_front();
      }
    }
    std::size_t off = 0;
    while (off < a.raw.size()) {
      ssize_t n = ::write(c, a.raw.data() + off, a.raw.size() - off);
      if (n <= 0) return;
      off += static_cast<std::size_t>(n);
    }
    if (a.after) a.after(c);
    if (a.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  }

  std::filesystem::path dir_;
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  std::deque<Answer> answers_;
  std::vector<SeenRequest> seen_;
  std::thread thread_;
};

}  // namespace vibepit::docker::test
