#pragma once
// A POSIX ustar archive built in memory: the build context of a locally built image.
#include <cstdint>
#include <string>
#include <string_view>

namespace vibepit::docker {

class TarWriter {
 public:
  // Paths are relative ("etc/passwd"); a path that does not fit ustar's name and prefix
  // fields, or that is absolute or climbs with "..", throws std::invalid_argument.
  void add_file(std::string_view path, std::string_view content, std::uint32_t mode = 0644);
  void add_directory(std::string_view path, std::uint32_t mode = 0755);
  void add_symlink(std::string_view path, std::string_view target);
  // The archive, ended with its two zero blocks. The writer is empty afterwards.
  std::string finish();
  std::size_t size() const { return out_.size(); }

 private:
  void header(std::string_view path, char type, std::uint64_t size, std::uint32_t mode,
              std::string_view link = {});
  std::string out_;
};

}  // namespace vibepit::docker
