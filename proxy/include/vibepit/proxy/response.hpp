#pragma once
// Responses the proxy writes itself.
#include <string>
#include <string_view>

namespace vibepit::proxy {

std::string_view reason_phrase(int status);
// A complete response with a short text body that says what happened and what to do.
std::string make_error_response(int status, std::string_view message, bool close);

}  // namespace vibepit::proxy
