// The decision log's file: rotation, write-back to the disk, reopening, and a full disk.
#include "vibepit/decision_log/decision_log.hpp"

#include "decision_log_helpers.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace vibepit::decision_log {
namespace {

using test::sample;
using test::wait_written;

// The file is rotated before the line that would take it past max_bytes; PATH.1 is the
// newest old file, PATH.<keep> the oldest, and nothing older is kept.
TEST(DecisionLog, RotatesPastMaxBytesKeepingTheNewestFiles) {
  char dir_template[] = "/tmp/vibepit-rotate-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  const std::size_t line = to_json_line(sample()).size();
  {
    DecisionLog log(path, 10, LogRotation{10 * line, 2});
    auto& p = log.make_producer(1 << 10);
    log.start();
    for (int i = 0; i < 45; ++i) p.push(sample());  // ids 0: every line is the same size
    log.stop();
    EXPECT_EQ(log.written(), 45u);
    EXPECT_EQ(log.rotations(), 4u);  // 45 lines, 10 a file: 4 full files, then 5 lines
  }
  auto lines = [](const std::string& f) {
    std::ifstream in(f);
    std::size_t n = 0;
    for (std::string l; std::getline(in, l);) ++n;
    return n;
  };
  EXPECT_EQ(lines(path), 5u);
  EXPECT_EQ(lines(path + ".1"), 10u);
  EXPECT_EQ(lines(path + ".2"), 10u);
  EXPECT_FALSE(std::filesystem::exists(path + ".3"));
  // Reopened with the file at 5 lines: the count starts from its size.
  {
    DecisionLog log(path, 10, LogRotation{10 * line, 2});
    auto& p = log.make_producer(1 << 10);
    log.start();
    for (int i = 0; i < 6; ++i) p.push(sample());
    log.stop();
    EXPECT_EQ(log.rotations(), 1u);
  }
  EXPECT_EQ(lines(path), 1u);
  EXPECT_EQ(lines(path + ".1"), 10u);
  std::filesystem::remove_all(dir);
}

std::size_t count_lines(const std::string& f) {
  std::ifstream in(f);
  std::size_t n = 0;
  for (std::string l; std::getline(in, l);) ++n;
  return n;
}

// cachestat(2) (Linux 6.5): how many of a file's pages are cached, dirty, under write-back.
// Debian 12's headers predate it, hence the numbers here.
struct CacheStatRange {
  std::uint64_t off, len;
};
struct CacheStat {
  std::uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
constexpr long kSysCachestat = 451;  // new system calls are numbered alike on every architecture

// The writer starts the disk write of what it has written a MiB at a time, instead of leaving
// it all dirty for the kernel to flush in one go 30 s later: once the writer has stopped, at
// most about a MiB of the file may still wait. Without it, all 8 MiB do.
TEST(DecisionLog, WrittenRecordsAreHandedToTheDiskAsTheyGo) {
  char dir_template[] = "/tmp/vibepit-writeback-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir.c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << dir << " is in memory: there is no disk to write back to";
  }
  const std::uint64_t target = 8u << 20;
  const std::size_t line = to_json_line(sample()).size();
  {
    DecisionLog log(path, 10);
    auto& p = log.make_producer(1 << 14);
    log.start();
    std::uint64_t pushed = 0;
    while (pushed * line < target) {
      for (int i = 0; i < 4096; ++i) p.push(sample());
      pushed += 4096;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (log.written() < pushed && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(log.written(), pushed);
    }
    log.stop();
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  CacheStatRange range{0, 0};  // the whole file
  CacheStat cs{};
  const long rc = ::syscall(kSysCachestat, fd, &range, &cs, 0);
  const int err = errno;
  ::close(fd);
  std::filesystem::remove_all(dir);
  if (rc != 0 && err == ENOSYS) GTEST_SKIP() << "this kernel has no cachestat(2) (Linux 6.5)";
  ASSERT_EQ(rc, 0) << std::strerror(err);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_GE(cs.nr_cache * page, target / 2) << "the file is not in the page cache at all";
  EXPECT_LE(cs.nr_dirty * page, DecisionLog::kWritebackChunk + (256u << 10))
      << cs.nr_dirty << " pages of " << cs.nr_cache << " still dirty";
}

// After an outside rotation (the file renamed away), reopen() starts PATH anew.
TEST(DecisionLog, ReopenStartsThePathAnew) {
  char dir_template[] = "/tmp/vibepit-reopen-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, path = dir + "/decisions.ndjson";
  DecisionLog log(path, 10);
  auto& p = log.make_producer(64);
  log.start();
  for (int i = 0; i < 3; ++i) p.push(sample());
  wait_written(log, 3);
  std::filesystem::rename(path, path + ".old");
  log.reopen();
  for (int i = 0; i < 2; ++i) p.push(sample());
  log.stop();
  EXPECT_EQ(count_lines(path + ".old"), 3u);
  EXPECT_EQ(count_lines(path), 2u);
  EXPECT_EQ(log.unwritten(), 0u);
  std::filesystem::remove_all(dir);
}

// A file that takes nothing (a full disk) costs the records their file copy, counted, and
// nothing else: they are still in the ring.
TEST(DecisionLog, WhatAFullDiskRefusesIsCountedNotLost) {
  DecisionLog log("/dev/full", 100);
  auto& p = log.make_producer(64);
  log.start();
  for (int i = 0; i < 7; ++i) p.push(sample());
  log.stop();
  EXPECT_EQ(log.written(), 7u);
  EXPECT_EQ(log.unwritten(), 7u);
  std::uint64_t lost = 0;
  EXPECT_EQ(log.since(0, 100, lost).size(), 7u);
}

}  // namespace
}  // namespace vibepit::decision_log
