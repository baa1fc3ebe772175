#pragma once
// What session_home.cpp and session_remove.cpp share: the role of a session's own home
// volume, removed with the session.
namespace vibepit::launcher {
inline constexpr const char* kRoleSessionHome = "session-home";
}  // namespace vibepit::launcher
