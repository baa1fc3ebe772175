#include "logging.hpp"

#include <chrono>
#include <ctime>
#include <memory>
#include <string>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace vibepit::appliance {
namespace {

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time;
    const std::time_t secs = std::chrono::system_clock::to_time_t(t);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()) % 1000;
    std::tm tm{};
    ::gmtime_r(&secs, &tm);
    char ts[40];
    const std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof ts - n, ".%03dZ", static_cast<int>(ms.count()));
    const auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::ordered_json j;
    j["ts"] = ts;
    j["level"] = std::string(level.data(), level.size());
    j["msg"] = std::string(msg.payload.data(), msg.payload.size());
    const std::string line =
        j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

void set_up_logging() {
  spdlog::set_default_logger(spdlog::stderr_color_mt("vibepit-proxy"));
  use_log_format("text");
}

void use_log_format(std::string_view format) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
}

}  // namespace vibepit::appliance
