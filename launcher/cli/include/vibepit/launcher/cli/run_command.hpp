#pragma once
// `vibepit run`: start a session (or join the project's running one) and attach to it.
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "vibepit/launcher/session/session_start.hpp"

namespace vibepit::launcher {

struct RunOptions {
  std::filesystem::path path;  // the project (default: the current directory)
  std::vector<std::string> allow_http, allow_dns, presets;
  SandboxSettings sandbox;
  std::vector<std::string> command;
  bool quiet = false;
  bool no_tty = false;
  bool yes = false;
  bool ask = false;         // hold denied requests for the user to decide (vibepit monitor)
  double ask_timeout = 60;  // seconds
};

// The exit status is the shell's or CMD's; vibepit's own failures use kRunFailed (125,
// exit_codes.hpp).
int cmd_run(const RunOptions& o, std::ostream& out, std::ostream& err);

}  // namespace vibepit::launcher
