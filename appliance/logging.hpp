#pragma once
// vibepit-proxy's own log on standard error (not the decision log): text for a terminal, or
// one JSON object a line for a cluster's log collector (config key log-format).
#include <string_view>

namespace vibepit::appliance {

// Sets spdlog's default logger, on standard error, with lines of text.
void set_up_logging();
// The lines' form from now on: "text" (time, level, message) or "json" ({"ts","level",
// "msg"}, the message's invalid UTF-8 replaced, so that every line parses).
void use_log_format(std::string_view format);

}  // namespace vibepit::appliance
