#pragma once
// The runtime commands of the vibepit CLI: allow-http, allow-dns, rules, logs, status.
// Each returns the process exit code (docs/cli.md) and writes to the given streams.
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

#include "vibepit/control/session_dir.hpp"
#include "vibepit/launcher/cli/exit_codes.hpp"

namespace vibepit::launcher {

struct Common {
  std::string session;                  // --session ID|DIR (or $VIBEPIT_SESSION)
  std::filesystem::path sessions_root;  // default: $XDG_STATE_HOME/vibepit/sessions
  bool json = false;
  bool color = false;  // colour the human output
};

// Thrown by select_session with the exit code to use and a message that says what to do.
struct SelectError {
  int code;
  std::string message;
};

// The session named by `which` (an id under root, or a directory), or the only live one.
control::StoredSession select_session(const Common& c);

// Sessions under root whose proxy process is alive (pid 0: not on this host, so kept).
std::vector<std::filesystem::path> live_sessions(const std::filesystem::path& root);

struct AllowOptions {
  std::string list;  // "allow-http" or "allow-dns"
  std::vector<std::string> entries;
  bool save = true;
  std::filesystem::path network_file;  // default: ./.vibepit/network.yaml
};

int cmd_allow(const Common& c, const AllowOptions& a, std::ostream& out, std::ostream& err);
// Add canonical entries to `list` ("allow-http" or "allow-dns") of the network file, as
// `vibepit allow-http` saves them (comments and owner kept, atomic), and approve them for
// the next `vibepit run`. Returns the entries that were new to the file; throws on a file
// problem.
std::vector<std::string> save_allowed(const Common& c, const std::filesystem::path& network_file,
                                      const std::string& list,
                                      const std::vector<std::string>& canonical);
int cmd_rules(const Common& c, std::ostream& out, std::ostream& err);

struct LogsOptions {
  bool follow = false;
  bool denied = false;
  std::size_t limit = 1000;  // records shown without -f: the newest this many
};
int cmd_logs(const Common& c, const LogsOptions& l, std::ostream& out, std::ostream& err);
int cmd_status(const Common& c, std::ostream& out, std::ostream& err);

// One decision record (a JSON line) as an aligned human line; empty when filtered out.
std::string format_record(const std::string& json_line, bool color, bool denied_only);

}  // namespace vibepit::launcher
