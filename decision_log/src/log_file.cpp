#include "vibepit/decision_log/log_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace vibepit::decision_log {

LogFile::LogFile(std::string path, LogRotation rotation)
    : path_(std::move(path)), rotation_(rotation) {
  if (!open()) {
    throw std::runtime_error("cannot open decision log \"" + path_ + "\": " + std::strerror(errno));
  }
}

LogFile::~LogFile() {
  close();
}

void LogFile::reopen() {
  close();
  broken_line_ = false;
  if (!open()) note_failure(0, errno);
}

bool LogFile::open() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return false;
  struct stat st {};
  file_bytes_ = ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  writeback_from_ = file_bytes_;
  writeback_ = true;
  return true;
}

void LogFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void LogFile::rotate() {
  close();
  for (unsigned i = rotation_.keep; i > 1; --i) {
    const std::string older = path_ + "." + std::to_string(i - 1);
    (void)std::rename(older.c_str(), (path_ + "." + std::to_string(i)).c_str());
  }
  (void)std::rename(path_.c_str(), (path_ + ".1").c_str());
  (void)open();
  rotations_.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Writes all of [data, data + size) unless the file refuses; `done` is what was written.
int write_all(int fd, const char* data, std::size_t size, std::size_t& done) {
  done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}
}  // namespace

// Writes `buf` (`lines` whole lines) to the file. What cannot be written (disk full, the
// file gone) is counted in unwritten(), and the proxy goes on: the records are still in
// the ring. A line cut short is ended by the next write, so the file stays one record a line.
void LogFile::write_out(std::string_view buf, std::size_t lines) {
  if (buf.empty()) return;
  if (fd_ < 0 && !open()) {
    note_failure(lines, errno);
    return;
  }
  std::size_t done = 0;
  if (broken_line_) {  // end the line a failed write cut
    if (const int err = write_all(fd_, "\n", 1, done); err != 0) {
      note_failure(lines, err);
      return;
    }
    ++file_bytes_;
    broken_line_ = false;
  }
  const int err = write_all(fd_, buf.data(), buf.size(), done);
  file_bytes_ += done;
  start_writeback();
  if (err == 0) {
    if (failing_) {
      failing_ = false;
      spdlog::info("decision log {}: writing again", path_);
    }
    return;
  }
  const auto whole = static_cast<std::size_t>(std::count(buf.begin(), buf.begin() + done, '\n'));
  broken_line_ = done > 0 && buf[done - 1] != '\n';
  note_failure(lines - whole, err);
}

// Left to itself, the kernel writes a file's dirty pages back 30 s after they were dirtied
// (vm.dirty_expire_centisecs), in one go: a busy minute's records, hundreds of MB, flushed
// by kernel threads that may run on the cores serving traffic, long after the load that made
// them. DNS answers at a fixed load waited behind it (docs/benchmarks.md). Starting the
// write of each MiB as it is written spreads the disk's work over the load that causes it,
// and keeps the dirty pages the log holds to about a MiB. Best effort: a file that does not
// take it (a pipe, a terminal) is not asked again.
void LogFile::start_writeback() {
  if (!writeback_ || file_bytes_ < writeback_from_ + kWritebackChunk) return;
  if (::sync_file_range(fd_, static_cast<off_t>(writeback_from_),
                        static_cast<off_t>(file_bytes_ - writeback_from_),
                        SYNC_FILE_RANGE_WRITE) != 0 &&
      errno != EINTR) {
    writeback_ = errno != ESPIPE && errno != EINVAL && errno != ENOSYS;
  }
  writeback_from_ = file_bytes_;
}

void LogFile::note_failure(std::size_t lines, int err) {
  unwritten_.fetch_add(lines, std::memory_order_relaxed);
  if (!failing_) {
    failing_ = true;
    spdlog::error("decision log {}: {}; records are counted as unwritten until it recovers", path_,
                  std::strerror(err));
  }
}

void LogFile::write(std::string_view all, const std::vector<std::size_t>& ends) {
  std::size_t start = 0, line_start = 0, lines = 0;
  for (const std::size_t end : ends) {
    const std::size_t chunk = line_start - start;
    if (rotation_.max_bytes != 0 && file_bytes_ + chunk != 0 &&
        file_bytes_ + chunk + (end - line_start) > rotation_.max_bytes) {
      write_out(all.substr(start, chunk), lines);
      start = line_start;
      lines = 0;
      rotate();
    }
    line_start = end;
    ++lines;
  }
  write_out(all.substr(start, line_start - start), lines);
}

}  // namespace vibepit::decision_log
