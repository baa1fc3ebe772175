#pragma once
// The files vibepit carries inside its binary (container/: the sandbox image's definition and
// the presets), so that it finds them wherever it is installed. Generated at build time by
// container/embed.cmake.
#include <map>
#include <string>

namespace vibepit::launcher {

// By path relative to container/ ("presets/github.yaml").
const std::map<std::string, std::string>& embedded_files();

}  // namespace vibepit::launcher
