#pragma once
// `vibepit secret add|rm|ls`: a running session's credentials (docs/credentials.md), over the
// control API. No command ever prints a value.
#include <iosfwd>
#include <string>

#include "vibepit/launcher/cli/commands.hpp"

namespace vibepit::launcher {

// `spec` as --secret takes it: NAME=HOST:PORT[,header=H][,format=F][,file=PATH | ,stdin].
int cmd_secret_add(const Common& c, const std::string& spec, std::ostream& out, std::ostream& err);
int cmd_secret_rm(const Common& c, const std::string& name, std::ostream& out, std::ostream& err);
int cmd_secret_ls(const Common& c, std::ostream& out, std::ostream& err);

}  // namespace vibepit::launcher
