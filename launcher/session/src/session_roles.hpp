#pragma once
// What session.cpp and session_remove.cpp share: the role of a session's own home volume.
namespace vibepit::launcher {
inline constexpr const char* kRoleSessionHome = "session-home";
}  // namespace vibepit::launcher
