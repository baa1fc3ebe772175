#include "vibepit/launcher/cli/engine.hpp"

#include <cctype>
#include <iomanip>
#include <string>

namespace vibepit::launcher {

docker::Client connect_engine() {
  return docker::Client::connect_from_env();
}

Report status_reporter(std::ostream& err, bool quiet, bool color) {
  if (quiet) return nullptr;
  return [&err, color](std::string_view line) {
    // "building proxy image ..." -> "    Building proxy image ..."; other lines indented.
    auto sp = line.find(' ');
    std::string verb(line.substr(0, sp));
    static const char* verbs[] = {"building", "pulling",  "debootstrap", "importing",
                                  "cannot",   "creating", "starting",    "started",
                                  "removing", "joining",  "using"};
    bool is_step = false;
    for (const char* v : verbs) is_step = is_step || verb == v;
    if (!is_step) {
      err << std::string(13, ' ') << line << "\n";
      return;
    }
    verb[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(verb[0])));
    err << (color ? "\033[1;32m" : "") << std::setw(12) << verb << (color ? "\033[0m" : "")
        << (sp == std::string_view::npos ? "" : std::string(line.substr(sp))) << "\n";
  };
}

}  // namespace vibepit::launcher
