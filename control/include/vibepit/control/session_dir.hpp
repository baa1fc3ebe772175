#pragma once
// The client's half of a session's credentials on disk, where the CLI finds it:
// $XDG_STATE_HOME/vibepit/sessions/<id>/ (directory 0700, files 0600). The server's private
// key is never written anywhere.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "vibepit/control/credentials.hpp"

namespace vibepit::control {

struct SessionInfo {
  std::string id;
  std::string control;   // "127.0.0.1:PORT": where the control API answers
  std::int64_t pid = 0;  // the proxy's pid when it runs on this host, else 0
  std::string created;   // RFC 3339, UTC
  std::string project;   // the project's root, for sessions vibepit run started
};

// $XDG_STATE_HOME/vibepit/sessions, or ~/.local/state/vibepit/sessions.
std::filesystem::path default_sessions_root();

// A fresh session id: 12 lower-case hex digits from the CSPRNG.
std::string new_session_id();

// Write ca.pem, client.pem, client-key.pem and, last, session.json into `dir`, creating it
// (and its parents) with mode 0700 and each file with mode 0600. Throws std::runtime_error.
void write_client_set(const std::filesystem::path& dir, const PeerCredentials& client,
                      const SessionInfo& info);

struct StoredSession {
  std::filesystem::path dir;
  SessionInfo info;
  PeerCredentials client;
};

// Read what write_client_set() wrote. Throws std::runtime_error naming the missing or bad
// file, and refuses a directory or key file that others can read.
StoredSession read_client_set(const std::filesystem::path& dir);

// Session directories under `root` that hold a session.json, sorted by name.
std::vector<std::filesystem::path> list_session_dirs(const std::filesystem::path& root);

}  // namespace vibepit::control
