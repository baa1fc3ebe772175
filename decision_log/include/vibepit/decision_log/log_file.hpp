#pragma once
// The decision log's file, as the writer thread writes it: whole lines appended, rotated by
// size, reopened after an outside rotation, and written through a failing disk without
// stopping the proxy (what cannot be written is counted). Writer thread only, but for the
// counters.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::decision_log {

// Rotation of the decision-log file: past max_bytes (0: never) it is renamed PATH.1 (PATH.1
// to PATH.2, and so on; PATH.<keep> is the oldest kept) and a new PATH is started.
struct LogRotation {
  std::uint64_t max_bytes = 0;
  unsigned keep = 3;
};

class LogFile {
 public:
  // Opens PATH for appending; throws std::runtime_error when it cannot.
  LogFile(std::string path, LogRotation rotation);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Writes the lines of `batch`, each ending at one of `ends`, rotating the file before a
  // line that would take it past max_bytes.
  void write(std::string_view batch, const std::vector<std::size_t>& ends);
  // Closes the file and opens PATH anew (after a rotation by someone else: logrotate).
  void reopen();

  const std::string& path() const { return path_; }
  std::uint64_t rotations() const { return rotations_.load(std::memory_order_relaxed); }
  // Records the file could not take (disk full, the file gone).
  std::uint64_t unwritten() const { return unwritten_.load(std::memory_order_relaxed); }

  // Every kWritebackChunk bytes the writer starts the disk write of what it wrote
  // (sync_file_range, SYNC_FILE_RANGE_WRITE: started, not waited for).
  static constexpr std::uint64_t kWritebackChunk = 1 << 20;

 private:
  bool open();
  void close();
  void rotate();
  void write_out(std::string_view buf, std::size_t lines);
  void start_writeback();
  void note_failure(std::size_t lines, int err);

  std::string path_;
  LogRotation rotation_;
  int fd_ = -1;
  std::uint64_t file_bytes_ = 0;  // the size of the current file
  bool broken_line_ = false;      // the file ends in a line cut short by a failed write
  bool failing_ = false;          // writes are failing (logged once per episode)
  // Where the part of the file not yet handed to the disk begins (see start_writeback()),
  // and whether the file takes sync_file_range() at all (a pipe or a terminal does not).
  std::uint64_t writeback_from_ = 0;
  bool writeback_ = true;
  std::atomic<std::uint64_t> rotations_{0};
  std::atomic<std::uint64_t> unwritten_{0};
};

}  // namespace vibepit::decision_log
