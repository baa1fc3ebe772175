#pragma once
// The project's network policy file, .vibepit/network.yaml: keys allow-http, allow-dns,
// presets and credentials, each a list of strings. Read with yaml-cpp; new entries are added to the
// text in place, so the user's comments, order and layout stay as they were.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vibepit::launcher {

struct NetworkFile {
  std::vector<std::string> allow_http;
  std::vector<std::string> allow_dns;
  std::vector<std::string> presets;
  // Credentials by reference only: NAME=HOST:PORT[,header=H][,format=F]. The value is the
  // environment variable NAME of whoever runs vibepit, never written here.
  std::vector<std::string> credentials;
};

class NetworkFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A missing file reads as empty. Throws NetworkFileError naming the file, the line and the
// problem for YAML errors, unknown keys, or values that are not lists of strings.
NetworkFile read_network_file(const std::filesystem::path& path,
                              std::optional<uid_t> also_owner = {});

// Parse the text of a network file (the same checks as read_network_file).
NetworkFile parse_network_yaml(const std::string& text, const std::string& name);

// Add `entries` to the list `key` ("allow-http" or "allow-dns") unless already there.
// Returns the text to write and fills `appended` with what was new. Comments and the
// order of everything already in the file are kept; only when the list is written in
// flow style ([a, b]) or is present but empty is that one key rewritten.
std::string add_to_network_yaml(const std::string& text, const std::string& key,
                                const std::vector<std::string>& entries,
                                std::vector<std::string>& appended);

// read, add_to_network_yaml, then write atomically (creating .vibepit/ when needed).
std::vector<std::string> save_entries(const std::filesystem::path& path, const std::string& key,
                                      const std::vector<std::string>& entries);

}  // namespace vibepit::launcher
