#pragma once
// vibepit monitor: a full-screen view of a session's decisions and held requests, where one
// key allows or refuses. The model and the layout are launcher/monitor's; this draws them
// with ncurses and talks to the proxy's control API.
#include <filesystem>
#include <ostream>

#include "vibepit/launcher/cli/commands.hpp"

namespace vibepit::launcher {

struct MonitorOptions {
  std::filesystem::path path;  // the project whose session to watch; empty: as --session
};

// Needs a terminal on standard input and output. 0 when the user quits or the session
// ends; kUsage without a terminal, kNoSession when there is no session to watch.
int cmd_monitor(const Common& c, const MonitorOptions& o, std::ostream& out, std::ostream& err);

}  // namespace vibepit::launcher
