#pragma once
// Answers the API's handlers share (api.cpp, api_secrets.cpp).
#include <nlohmann/json.hpp>

#include "vibepit/control/api.hpp"

namespace vibepit::control {

// `j` as the body, with a newline.
ApiResponse json_response(int status, const nlohmann::json& j);
// 405 with an Allow header listing `allow`.
ApiResponse method_not_allowed(const char* allow);

}  // namespace vibepit::control
