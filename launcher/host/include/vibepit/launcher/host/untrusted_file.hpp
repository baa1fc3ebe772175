#pragma once
// Files in a directory the sandbox can write (the project's .vibepit/). The agent may plant
// symlinks there, so the last directory and the file are opened without following them
// (openat, O_NOFOLLOW), only regular files owned by the user are read, and a write goes to a
// fresh temporary made with O_EXCL and renamed into place within the same directory.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace vibepit::launcher {

class UntrustedFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file's content; nullopt when it (or its directory) does not exist. Throws
// UntrustedFileError for a symlink, anything but a regular file, a file owned by another
// user than vibepit's (or `also_owner`: root reading a project for its owner, whom the
// agent runs as), or one larger than `max_bytes`.
std::optional<std::string> read_untrusted_file(const std::filesystem::path& path,
                                               std::size_t max_bytes = 1 << 20,
                                               std::optional<uid_t> also_owner = {});

// The project owner whose files root may read there: the owner of `project_root` when
// vibepit runs as root, else nothing.
std::optional<uid_t> owner_trusted_by_root(const std::filesystem::path& project_root);

// Replace the file's content atomically, creating its directory (mode 0755) when missing.
// A symlink in place of the directory, the file or the temporary is never followed.
void write_untrusted_file(const std::filesystem::path& path, const std::string& content);

// A directory that files are written into later (vibepit ci's report and learned rules).
// Inside `anchor` (the project, which the sandbox can write), the path is taken lexically
// and every component below the anchor is opened with O_NOFOLLOW, made (mode 0755) when
// missing: no symlink the sandbox planted is ever followed. Outside it the path is the
// user's own, opened as given. Open it before the sandbox runs: the descriptor keeps naming
// that directory, whatever the sandbox renames or replaces afterwards. Throws
// UntrustedFileError.
class OutputDir {
 public:
  // `dir` absolute or relative to the current directory; `anchor` absolute, no symlinks.
  OutputDir(const std::filesystem::path& dir, const std::filesystem::path& anchor);
  ~OutputDir();
  OutputDir(OutputDir&& other) noexcept;
  OutputDir& operator=(OutputDir&&) = delete;
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  // Replace `name`'s content atomically, as write_untrusted_file() does.
  void write(const std::string& name, const std::string& content) const;
  const std::filesystem::path& path() const { return dir_; }

 private:
  int fd_ = -1;
  std::filesystem::path dir_;
};

}  // namespace vibepit::launcher
