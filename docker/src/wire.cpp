#include "vibepit/docker/wire.hpp"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "vibepit/docker/error.hpp"

namespace vibepit::docker {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::bad_request:
      return "bad request";
    case ErrorKind::forbidden:
      return "forbidden";
    case ErrorKind::not_found:
      return "not found";
    case ErrorKind::conflict:
      return "conflict";
    case ErrorKind::not_modified:
      return "not modified";
    case ErrorKind::server:
      return "daemon error";
    case ErrorKind::unavailable:
      return "daemon unavailable";
    case ErrorKind::protocol:
      return "protocol error";
    case ErrorKind::timeout:
      return "timeout";
    case ErrorKind::unsupported:
      return "unsupported";
  }
  return "?";
}

ErrorKind kind_for_status(int status) {
  switch (status) {
    case 304:
      return ErrorKind::not_modified;
    case 400:
      return ErrorKind::bad_request;
    case 403:
      return ErrorKind::forbidden;
    case 404:
      return ErrorKind::not_found;
    case 409:
      return ErrorKind::conflict;
    default:
      return ErrorKind::server;
  }
}

std::string socket_path_from_docker_host(const char* docker_host) {
  if (docker_host == nullptr || *docker_host == '\0') return kDefaultSocket;
  const std::string_view value(docker_host);
  constexpr std::string_view unix_scheme = "unix://";
  if (value.substr(0, unix_scheme.size()) == unix_scheme) {
    std::string path(value.substr(unix_scheme.size()));
    if (path.empty() || path.front() != '/')
      throw DockerError(ErrorKind::unsupported,
                        "DOCKER_HOST=" + std::string(value) + ": expected unix:///absolute/path");
    return path;
  }
  throw DockerError(ErrorKind::unsupported,
                    "DOCKER_HOST=" + std::string(value) +
                        ": only unix:// sockets are supported (a local Docker engine); unset "
                        "DOCKER_HOST or point it at unix:///var/run/docker.sock");
}

const char* to_string(EngineKind kind) {
  return kind == EngineKind::podman ? "podman" : "docker";
}

std::vector<std::string> engine_sockets(const char* docker_host, const char* xdg_runtime_dir) {
  if (docker_host != nullptr && *docker_host != '\0')
    return {socket_path_from_docker_host(docker_host)};
  std::vector<std::string> out = {kDefaultSocket, kPodmanRootfulSocket};
  if (xdg_runtime_dir != nullptr && xdg_runtime_dir[0] == '/')
    out.push_back(std::string(xdg_runtime_dir) + "/podman/podman.sock");
  return out;
}

std::string ApiVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::optional<ApiVersion> parse_api_version(std::string_view text) {
  ApiVersion v;
  const char* p = text.data();
  const char* end = p + text.size();
  auto a = std::from_chars(p, end, v.major);
  if (a.ec != std::errc() || a.ptr == end || *a.ptr != '.') return std::nullopt;
  auto b = std::from_chars(a.ptr + 1, end, v.minor);
  if (b.ec != std::errc() || b.ptr != end || a.ptr + 1 == b.ptr) return std::nullopt;
  return v;
}

ApiVersion negotiate_api(std::string_view server, std::string_view server_min) {
  auto have = parse_api_version(server);
  if (!have)
    throw DockerError(ErrorKind::protocol, "the container engine reported API version \"" +
                                               std::string(server) +
                                               "\", which is not MAJOR.MINOR");
  if (*have < kMinimumApi)
    throw DockerError(ErrorKind::unsupported,
                      "the container engine speaks API " + have->to_string() + "; vibepit needs " +
                          kMinimumApi.to_string() + " or newer (Docker Engine 20.10+)");
  if (auto min = parse_api_version(server_min); min && *min > kPreferredApi)
    throw DockerError(ErrorKind::unsupported, "the container engine no longer speaks API " +
                                                  kPreferredApi.to_string() + " (its oldest is " +
                                                  min->to_string() + ")");
  return *have < kPreferredApi ? *have : kPreferredApi;
}

std::string daemon_error_message(int status, std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string()) {
    auto m = j["message"].get<std::string>();
    if (!m.empty()) return m;
  }
  std::string text(body.substr(0, 500));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
    text.pop_back();
  if (text.empty()) return "the container engine answered HTTP " + std::to_string(status);
  return text;
}

std::string url_encode(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (unsigned char c : text) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string encode_filters(const std::map<std::string, std::vector<std::string>>& filters) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, values] : filters) j[key] = values;
  return url_encode(j.dump());
}

bool StreamDemux::feed(std::string_view data, const Sink& sink) {
  while (!data.empty() && !failed_) {
    if (remaining_ == 0) {
      const std::size_t take = std::min(sizeof header_ - header_len_, data.size());
      std::copy_n(data.data(), take, header_ + header_len_);
      header_len_ += take;
      data.remove_prefix(take);
      if (header_len_ < sizeof header_) break;
      header_len_ = 0;
      if (header_[0] > 2 || header_[1] != 0 || header_[2] != 0 || header_[3] != 0) {
        failed_ = true;
        break;
      }
      stream_ = static_cast<Stream>(header_[0]);
      remaining_ = (std::uint32_t{header_[4]} << 24) | (std::uint32_t{header_[5]} << 16) |
                   (std::uint32_t{header_[6]} << 8) | std::uint32_t{header_[7]};
      continue;
    }
    const std::size_t n = std::min<std::size_t>(remaining_, data.size());
    sink(stream_, data.substr(0, n));
    remaining_ -= static_cast<std::uint32_t>(n);
    data.remove_prefix(n);
  }
  return !failed_;
}

bool LineSplitter::feed(std::string_view data, const std::function<void(std::string_view)>& line) {
  while (!data.empty()) {
    const auto nl = data.find('\n');
    if (nl == std::string_view::npos) {
      if (partial_.size() + data.size() > max_line_) return false;
      partial_.append(data);
      return true;
    }
    if (partial_.empty()) {
      line(data.substr(0, nl));
    } else {
      if (partial_.size() + nl > max_line_) return false;
      partial_.append(data.substr(0, nl));
      line(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
  return true;
}

std::string LineSplitter::take_rest() {
  std::string rest;
  rest.swap(partial_);
  return rest;
}

std::optional<Progress> parse_progress(std::string_view line) {
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  Progress p;
  auto str = [&](const nlohmann::json& o, const char* key) -> std::string {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  p.error = str(j, "error");
  if (p.error.empty() && j.contains("errorDetail") && j["errorDetail"].is_object())
    p.error = str(j["errorDetail"], "message");
  if (auto s = str(j, "stream"); !s.empty()) {
    p.text = std::move(s);
  } else if (auto st = str(j, "status"); !st.empty()) {
    p.text = std::move(st);
    if (auto prog = str(j, "progress"); !prog.empty()) p.text += " " + prog;
    p.id = str(j, "id");
  }
  while (!p.text.empty() && (p.text.back() == '\n' || p.text.back() == '\r')) p.text.pop_back();
  if (j.contains("aux") && j["aux"].is_object()) p.id = str(j["aux"], "ID");
  return p;
}

}  // namespace vibepit::docker
