// `file-append`: what appending to a file costs the thread that does it, as the decision
// log's writer appends its records (decision_log/src/log_file.cpp): a write() of --chunk
// bytes every --interval-us, and every --sync-every bytes a sync_file_range(WRITE) that
// starts the disk write of what was appended. Each call is timed on its own. On a kernel
// that does not preempt system calls (preempt=none) a call's time is time the core gives
// to nothing else, so on a core the writer shares with an I/O thread an answer that
// arrives meanwhile waits for it (docs/benchmarks.md, "What the record's write costs the
// tail"). Run it pinned, e.g. `taskset -c 1 vibepit-bench file-append --path F`.
// Each call's thread CPU time is reported beside its wall time: they differ where the call
// sleeps, as a direct write (--direct: O_DIRECT, whole 4 KiB blocks) does while the device
// copies the bytes. The file is created (or truncated) and removed at the end unless --keep.
#include "common.hpp"
#include "modes.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

namespace vibepit::bench {
namespace {

struct AppendOptions {
  std::string path;
  std::size_t chunk = 8192;
  unsigned interval_us = 2500;
  std::uint64_t count = 1200;
  std::uint64_t sync_every = 1 << 20;  // 0: never
  bool keep = false;
  bool direct = false;
};

constexpr std::size_t kBlock = 4096;  // O_DIRECT's alignment for buffer, offset and length

Clock::duration thread_cpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// Lines of 100 bytes, as NDJSON records are lines, in a block-aligned buffer.
struct Buffer {
  explicit Buffer(std::size_t bytes)
      : data(
            static_cast<char*>(std::aligned_alloc(kBlock, (bytes + kBlock - 1) / kBlock * kBlock))),
        size(bytes) {
    if (data == nullptr) throw std::bad_alloc();
    std::memset(data, 'x', size);
    for (std::size_t i = 99; i < size; i += 100) data[i] = '\n';
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data;
  std::size_t size;
};

ModeResult run_file_append(const AppendOptions& o) {
  if (o.direct && o.chunk % kBlock != 0) throw ConfigError("--direct needs --chunk in 4096s");
  const int flags = O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC | (o.direct ? O_DIRECT : 0);
  const int fd = ::open(o.path.c_str(), flags, 0644);
  if (fd < 0) throw ConfigError("cannot open " + o.path + ": " + std::strerror(errno));
  const Buffer data(o.chunk);
  Samples writes, write_cpu, syncs;
  writes.reserve(static_cast<std::size_t>(o.count));
  write_cpu.reserve(static_cast<std::size_t>(o.count));
  Clock::duration write_total{}, sync_total{};
  std::uint64_t written = 0, synced_to = 0, done = 0;
  std::string error;
  const auto cpu_before = cpu_usage();
  const auto start = Clock::now();
  for (; done < o.count && !stop_requested(); ++done) {
    const auto cpu_a = thread_cpu();
    const auto a = Clock::now();
    const ssize_t n = ::write(fd, data.data, data.size);
    const auto b = Clock::now();
    write_cpu.add(thread_cpu() - cpu_a);
    if (n != static_cast<ssize_t>(data.size)) {
      error = n < 0 ? std::strerror(errno) : "short write";
      break;
    }
    writes.add(b - a);
    write_total += b - a;
    written += data.size;
    if (o.sync_every != 0 && written >= synced_to + o.sync_every) {
      const auto c = Clock::now();
      (void)::sync_file_range(fd, static_cast<off_t>(synced_to),
                              static_cast<off_t>(written - synced_to), SYNC_FILE_RANGE_WRITE);
      const auto d = Clock::now();
      syncs.add(d - c);
      sync_total += d - c;
      synced_to = written;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(o.interval_us));
  }
  const double elapsed = seconds_between(start, Clock::now());
  ::close(fd);
  if (!o.keep) ::unlink(o.path.c_str());

  const auto in_calls = std::chrono::duration<double>(write_total + sync_total).count();
  ModeResult r;
  r.json["mode"] = "file-append";
  r.json["chunk_bytes"] = o.chunk;
  r.json["interval_us"] = o.interval_us;
  r.json["sync_every_bytes"] = o.sync_every;
  r.json["direct"] = o.direct;
  r.json["writes"] = done;
  r.json["bytes"] = written;
  r.json["seconds"] = elapsed;
  r.json["write_us"] = writes.summary();
  // The thread's CPU time in each write(), with the two clock reads around it (system calls).
  r.json["write_cpu_us"] = write_cpu.summary();
  r.json["sync_file_range_us"] = syncs.summary();
  // The share of the run this thread spent inside the two calls.
  r.json["in_calls_share"] = elapsed > 0 ? in_calls / elapsed : 0.0;
  r.json["cpu_before"] = cpu_before;
  r.json["cpu_after"] = cpu_usage();
  if (!error.empty()) r.json["error"] = error;
  r.ok = done > 0 && error.empty();
  return r;
}

}  // namespace

void add_file_append(CLI::App& app, Runner& runner) {
  auto opts = std::make_shared<AppendOptions>();
  auto* cmd = app.add_subcommand(
      "file-append",
      "Time each append to a file as the decision log's writer appends (a yardstick)");
  cmd->add_option("--path", opts->path, "The file to append to (created, truncated, removed)")
      ->required();
  cmd->add_option("--chunk", opts->chunk, "Bytes per write()")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--interval-us", opts->interval_us, "Sleep between writes, microseconds")
      ->check(CLI::Range(0, 1'000'000));
  cmd->add_option("--count", opts->count, "Writes")->check(CLI::Range(1, 1'000'000));
  cmd->add_option("--sync-every", opts->sync_every,
                  "Start the disk write (sync_file_range) every this many bytes; 0: never");
  cmd->add_flag("--keep", opts->keep, "Keep the file");
  cmd->add_flag("--direct", opts->direct, "Open with O_DIRECT (--chunk in 4096s)");
  cmd->callback([opts, &runner] { runner = [opts] { return run_file_append(*opts); }; });
}

}  // namespace vibepit::bench
