#include "vibepit/runtime/decision_log.hpp"

#include "vibepit/policy/ip.hpp"
#include "vibepit/runtime/config.hpp"
#include "vibepit/runtime/thread_name.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace vibepit::runtime {
namespace {
constexpr std::uint64_t kIdBlock = 4096;  // ids a producer takes from the shared counter at once
constexpr std::size_t kBatch = 1024;      // records the writer formats and writes at once

// A line being written at the end of a string. Each field first makes room for its longest
// form (one capacity check a field, not one a byte), then writes through a pointer; done()
// cuts the string to what was written. The writer thread formats every record, so this is
// most of its work per record (bench/micro/log_bench.cpp).
class Line {
 public:
  explicit Line(std::string& out) : out_(out) { p_ = end_ = out.data() + out.size(); }
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;

  // `name` is one of this file's literals, plain ASCII: nothing to escape.
  template <std::size_t N>
  void field(const char (&name)[N], std::string_view v) {
    room(N + 5 + 6 * v.size());
    key(name);
    string(v);
  }
  template <std::size_t N>
  void field(const char (&name)[N], std::uint64_t v) {
    room(N + 3 + 20);
    key(name);
    number(v);
  }
  // `,"name":` and the text as it is, which must be valid JSON already.
  template <std::size_t N>
  void raw_field(const char (&name)[N], std::string_view json) {
    room(N + 3 + json.size());
    key(name);
    copy(json);
  }
  void raw(std::string_view json) {
    room(json.size());
    copy(json);
  }
  void value(std::uint64_t v) {
    room(20);
    number(v);
  }
  // The timestamp: a JSON string, RFC 3339 UTC with microseconds.
  void timestamp(std::int64_t ts_us);
  // A JSON string of an address's text and a port, "192.0.2.1:40312" or "[2001:db8::1]:53".
  void host_port(const policy::IpAddr& ip, std::uint16_t port) {
    room(2 + 2 + policy::IpAddr::kMaxText + 1 + 5);
    *p_++ = '"';
    if (ip.v6) *p_++ = '[';
    p_ = ip.write(p_);
    if (ip.v6) *p_++ = ']';
    *p_++ = ':';
    number(port);
    *p_++ = '"';
  }
  // A JSON string of an address's text.
  void address(const policy::IpAddr& ip) {
    room(2 + policy::IpAddr::kMaxText);
    *p_++ = '"';
    p_ = ip.write(p_);
    *p_++ = '"';
  }
  void done() {
    assert(p_ <= end_);  // every write made its room first
    out_.resize(static_cast<std::size_t>(p_ - out_.data()));
  }

 private:
  void room(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) < n) grow(n);
  }
  // Out of line: taken once a line at its start, and only again for a long field.
  [[gnu::noinline]] void grow(std::size_t n) {
    const auto at = static_cast<std::size_t>(p_ - out_.data());
    out_.resize(at + std::max<std::size_t>(n, kLine));
    p_ = out_.data() + at;
    end_ = out_.data() + out_.size();
  }
  template <std::size_t N>
  void key(const char (&name)[N]) {
    *p_++ = ',';
    *p_++ = '"';
    std::memcpy(p_, name, N - 1);
    p_ += N - 1;
    *p_++ = '"';
    *p_++ = ':';
  }
  void copy(std::string_view v) {
    std::memcpy(p_, v.data(), v.size());
    p_ += v.size();
  }
  void number(std::uint64_t v) { p_ = std::to_chars(p_, p_ + 20, v).ptr; }
  void string(std::string_view v);  // room: 2 + 6 × v.size()

  static constexpr std::size_t kLine = 512;  // room made at once: most lines fit
  std::string& out_;
  char* p_;
  char* end_;
};

void Line::timestamp(std::int64_t ts_us) {
  // Only the writer thread formats; the calendar part changes once a second.
  thread_local std::time_t cached_secs = -1;
  thread_local char cached[32];
  thread_local std::size_t cached_len = 0;
  std::time_t secs = ts_us / 1'000'000;
  if (secs != cached_secs) {
    std::tm tm{};
    gmtime_r(&secs, &tm);
    cached_len = std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_secs = secs;
  }
  room(cached_len + 11);
  *p_++ = '"';
  copy({cached, cached_len});
  auto frac = static_cast<unsigned>(ts_us % 1'000'000);
  char digits[9] = {'.', '0', '0', '0', '0', '0', '0', 'Z', '"'};
  for (int i = 6; i >= 1; --i, frac /= 10) digits[i] = static_cast<char>('0' + frac % 10);
  copy({digits, sizeof digits});
}

// The bytes JSON takes as they are in a string: printable ASCII but '"' and '\\'.
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> t{};
  for (int b = 0x20; b < 0x80; ++b) t[static_cast<std::size_t>(b)] = b != '"' && b != '\\';
  return t;
}();

// The length of the valid UTF-8 sequence at the start of [s, end), or 0 where there is none
// (no overlongs, no surrogates, at most U+10FFFF).
std::size_t utf8_sequence(const unsigned char* s, const unsigned char* end) {
  const unsigned c = s[0];
  const std::size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (len == 0 || c > 0xf4 || static_cast<std::size_t>(end - s) < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((s[k] & 0xc0) != 0x80) return 0;
  }
  if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))) return 0;
  if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))) return 0;
  return len;
}

// JSON string escaping. Bytes that are not valid UTF-8 (hosts come from the wire) become
// U+FFFD, so every line is valid JSON. A byte takes at most 6 (a control byte's \u00XX).
void Line::string(std::string_view v) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* s = reinterpret_cast<const unsigned char*>(v.data());
  const auto* const end = s + v.size();
  *p_++ = '"';
  while (s != end) {
    // Copy the run of plain printable ASCII at once; escape only what needs it.
    const auto* run = s;
    while (run != end && kPlain[*run]) ++run;
    std::memcpy(p_, s, static_cast<std::size_t>(run - s));
    p_ += run - s;
    s = run;
    if (s == end) break;
    const unsigned c = *s;
    if (c == '"' || c == '\\') {
      *p_++ = '\\';
      *p_++ = static_cast<char>(c);
      ++s;
    } else if (c < 0x20) {
      std::memcpy(p_, "\\u00", 4);
      p_[4] = kHex[c >> 4];
      p_[5] = kHex[c & 0xf];
      p_ += 6;
      ++s;
    } else if (const std::size_t len = utf8_sequence(s, end); len != 0) {
      std::memcpy(p_, s, len);
      p_ += len;
      s += len;
    } else {
      std::memcpy(p_, "\xef\xbf\xbd", 3);
      p_ += 3;
      ++s;
    }
  }
  *p_++ = '"';
}

void mode_fields(Line& line, const DecisionRecord& r) {
  line.field("mode", policy::to_string(r.mode));
  // would_deny marks an allow that no rule matched. A later stage may still deny the request
  // (every resolved address blocked, the name did not resolve): that record is a denial.
  if (r.would_deny && r.verdict == policy::Verdict::allow) line.raw(",\"would_deny\":true");
}

// A summary stands for `count` decisions of one client in one interval (RecordFolder).
void summary_fields(Line& line, const DecisionRecord& r) {
  if (r.count == 0) return;
  line.field("count", r.count);
  line.field("interval_ms", std::uint64_t{r.interval_ms});
}

// The client's "address:port": its text when the record carries one, else made here from
// client_ip and client_port.
void client_field(Line& line, const DecisionRecord& r) {
  if (!r.client.empty() || r.client_port == 0) return line.field("client", r.client);
  line.raw(",\"client\":");
  line.host_port(r.client_ip, r.client_port);
}

void dns_fields(Line& line, const DecisionRecord& r) {
  client_field(line, r);
  if (r.transport) line.field("transport", r.transport);
  line.field("qname", r.host);
  line.field("qtype", r.qtype ? dns_type_name(r.qtype) : std::string());
  line.field("rcode", r.rcode ? r.rcode : "");
  line.raw(",\"addrs\":[");
  for (std::size_t i = 0; i < r.addrs.size(); ++i) {
    if (i) line.raw(",");
    line.address(r.addrs[i]);
  }
  line.raw("]");
  line.raw_field("cached", r.cached ? "true" : "false");
  line.field("verdict", policy::to_string(r.verdict));
  line.field("reason", policy::to_string(r.reason));
  line.field("rule", r.rule);
  if (!r.range.empty()) line.field("range", r.range);
  if (!r.detail.empty()) line.field("detail", r.detail.view());
  line.field("gen", r.gen);
  mode_fields(line, r);
  summary_fields(line, r);
  if (r.elapsed_us) line.field("us", std::uint64_t{r.elapsed_us});
}

}  // namespace

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string to_json_line(const DecisionRecord& r) {
  std::string out;
  out.reserve(320);
  append_json_line(out, r);
  return out;
}

void append_json_line(std::string& out, const DecisionRecord& r) {
  // Written by hand: the writer thread formats every record, and this is several times
  // cheaper than building a JSON object first.
  Line line(out);
  line.raw("{\"id\":");
  line.value(r.id);
  line.raw(",\"ts\":");
  line.timestamp(r.ts_us);
  line.field("src", r.src);
  if (std::string_view(r.src) == "dns") {
    line.field("event", "decision");
    dns_fields(line, r);
    line.raw("}\n");
    return line.done();
  }
  line.raw_field("event", r.close ? "\"close\"" : "\"decision\"");
  client_field(line, r);
  line.field("method", r.method);
  line.field("host", r.host);
  line.field("port", std::uint64_t{r.port});
  line.field("verdict", policy::to_string(r.verdict));
  line.field("reason", policy::to_string(r.reason));
  line.field("rule", r.rule);
  if (!r.range.empty()) line.field("range", r.range);
  line.field("addr", r.addr);
  if (!r.detail.empty()) line.field("detail", r.detail.view());
  if (r.status != 0) line.field("status", std::uint64_t{r.status});
  line.field("gen", r.gen);
  mode_fields(line, r);
  summary_fields(line, r);
  if (r.elapsed_us && !r.close) line.field("us", std::uint64_t{r.elapsed_us});
  if (r.close || r.totals) {
    line.field("bytes_up", r.bytes_up);
    line.field("bytes_down", r.bytes_down);
    line.field("ms", r.ms);
  }
  line.raw("}\n");
  line.done();
}

DecisionLog::Producer::Producer(std::size_t capacity)
    : slots_(std::bit_ceil(std::max<std::size_t>(capacity, 2))), mask_(slots_.size() - 1) {}

void DecisionLog::Producer::push(DecisionRecord&& r) {
  auto head = head_.load(std::memory_order_relaxed);
  if (head - tail_.load(std::memory_order_acquire) >= slots_.size()) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slots_[head & mask_] = std::move(r);
  head_.store(head + 1, std::memory_order_seq_cst);
  // A plain load while the writer is awake (it polls): no syscall on this path.
  if (owner_ != nullptr && owner_->asleep_.load(std::memory_order_seq_cst) != 0) owner_->wake();
}

bool DecisionLog::Producer::pop(DecisionRecord& out) {
  auto tail = tail_.load(std::memory_order_relaxed);
  if (tail == head_.load(std::memory_order_acquire)) return false;
  // Moved out through a temporary: a move assignment straight into `out` would hand out's
  // old string buffers to the slot, and every slot would keep heap memory while idle.
  out = DecisionRecord(std::move(slots_[tail & mask_]));
  tail_.store(tail + 1, std::memory_order_release);
  return true;
}

namespace {

bool keepable(const std::string& s) {
  return s.capacity() > std::string().capacity() && s.capacity() <= RecordBuffers::kTextMax;
}

template <typename T>
bool take_larger(T& from, T& held, bool keep) {
  if (!keep || from.capacity() <= held.capacity()) return false;
  std::swap(from, held);
  return true;
}

template <typename T>
void give_emptied(T& held, T& to) {
  to = std::move(held);
  to.clear();
  held = T();
}

}  // namespace

bool RecordBuffers::take(DecisionRecord& r) {
  bool took = take_larger(r.host, host, keepable(r.host));
  took |= take_larger(r.rule, rule, keepable(r.rule));
  took |= take_larger(r.addr, addr, keepable(r.addr));
  took |= take_larger(r.addrs, addrs, r.addrs.capacity() <= kAddrsMax);
  return took;
}

void RecordBuffers::give(DecisionRecord& r) {
  give_emptied(host, r.host);
  give_emptied(rule, r.rule);
  give_emptied(addr, r.addr);
  give_emptied(addrs, r.addrs);
}

bool RecordBuffers::empty() const {
  const std::size_t inline_text = std::string().capacity();
  return host.capacity() <= inline_text && rule.capacity() <= inline_text &&
         addr.capacity() <= inline_text && addrs.capacity() == 0;
}

void DecisionLog::Producer::reuse_buffers(DecisionRecord& r) {
  const auto tail = spare_tail_.load(std::memory_order_relaxed);
  if (tail == spare_head_.load(std::memory_order_acquire)) return;  // none back yet
  spares_[tail % kSpares].give(r);
  spare_tail_.store(tail + 1, std::memory_order_release);
}

void DecisionLog::Producer::give_back(DecisionRecord& r) {
  const auto head = spare_head_.load(std::memory_order_relaxed);
  if (head - spare_tail_.load(std::memory_order_acquire) >= kSpares) return;  // enough back
  // This slot's buffers went to a record (give() leaves it empty), or it never held any.
  if (!spares_[head % kSpares].take(r)) return;  // nothing worth keeping
  spare_head_.store(head + 1, std::memory_order_release);
}

std::uint64_t DecisionLog::Producer::next_id() {
  if (id_next_ == id_end_) {
    id_next_ = owner_->take_id_block();
    id_end_ = id_next_ + kIdBlock;
  }
  return id_next_++;
}

DecisionLog::DecisionLog(const std::string& path, std::size_t ring_capacity, LogRotation rotation)
    : rotation_(rotation),
      ring_(ring_capacity, ring_capacity > SIZE_MAX / kRingBytesPerRecord
                               ? SIZE_MAX
                               : ring_capacity * kRingBytesPerRecord) {
  if (path == "-") {
    to_stdout_ = true;
  } else if (!path.empty()) {
    path_ = path;
    if (!open_file()) {
      throw std::runtime_error("cannot open decision log \"" + path +
                               "\": " + std::strerror(errno));
    }
  }
}

bool DecisionLog::open_file() {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return false;
  struct stat st {};
  file_bytes_ = ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  writeback_from_ = file_bytes_;
  writeback_ = true;
  return true;
}

void DecisionLog::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void DecisionLog::rotate() {
  close_file();
  for (unsigned i = rotation_.keep; i > 1; --i) {
    const std::string older = path_ + "." + std::to_string(i - 1);
    (void)std::rename(older.c_str(), (path_ + "." + std::to_string(i)).c_str());
  }
  (void)std::rename(path_.c_str(), (path_ + ".1").c_str());
  (void)open_file();
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
void DecisionLog::write_out(std::string_view buf, std::size_t lines) {
  if (buf.empty()) return;
  if (fd_ < 0 && !open_file()) {
    note_write_failure(lines, errno);
    return;
  }
  std::size_t done = 0;
  if (broken_line_) {  // end the line a failed write cut
    if (const int err = write_all(fd_, "\n", 1, done); err != 0) {
      note_write_failure(lines, err);
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
  note_write_failure(lines - whole, err);
}

// Left to itself, the kernel writes a file's dirty pages back 30 s after they were dirtied
// (vm.dirty_expire_centisecs), in one go: a busy minute's records, hundreds of MB, flushed
// by kernel threads that may run on the cores serving traffic, long after the load that made
// them. DNS answers at a fixed load waited behind it (docs/benchmarks.md). Starting the
// write of each MiB as it is written spreads the disk's work over the load that causes it,
// and keeps the dirty pages the log holds to about a MiB. Best effort: a file that does not
// take it (a pipe, a terminal) is not asked again.
void DecisionLog::start_writeback() {
  if (!writeback_ || file_bytes_ < writeback_from_ + kWritebackChunk) return;
  if (::sync_file_range(fd_, static_cast<off_t>(writeback_from_),
                        static_cast<off_t>(file_bytes_ - writeback_from_),
                        SYNC_FILE_RANGE_WRITE) != 0 &&
      errno != EINTR) {
    writeback_ = errno != ESPIPE && errno != EINVAL && errno != ENOSYS;
  }
  writeback_from_ = file_bytes_;
}

void DecisionLog::note_write_failure(std::size_t lines, int err) {
  unwritten_.fetch_add(lines, std::memory_order_relaxed);
  if (!failing_) {
    failing_ = true;
    spdlog::error("decision log {}: {}; records are counted as unwritten until it recovers", path_,
                  std::strerror(err));
  }
}

// Writes batch_ out, rotating the file before a line that would take it past max_bytes.
void DecisionLog::write_batch() {
  if (to_stdout_) {
    std::fwrite(batch_.data(), 1, batch_.size(), stdout);
    return;
  }
  if (path_.empty()) return;
  const std::string_view all(batch_);
  std::size_t start = 0, line_start = 0, lines = 0;
  for (const std::size_t end : batch_ends_) {
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

void DecisionLog::reopen() {
  reopen_.store(true, std::memory_order_seq_cst);
  wake();
}

void DecisionLog::wake() {
  if (asleep_.exchange(0, std::memory_order_seq_cst) != 0) asleep_.notify_one();
}

std::size_t DecisionLog::waiting() const {
  std::size_t n = 0;
  for (const auto& p : producers_) {
    n += p->head_.load(std::memory_order_acquire) - p->tail_.load(std::memory_order_relaxed);
  }
  return n;
}

bool DecisionLog::queues_empty() const {
  for (const auto& p : producers_) {
    if (p->head_.load(std::memory_order_seq_cst) != p->tail_.load(std::memory_order_relaxed)) {
      return false;
    }
  }
  return true;
}

DecisionLog::~DecisionLog() {
  stop();
  close_file();
}

std::uint64_t DecisionLog::take_id_block() {
  return 1 + id_blocks_.fetch_add(1, std::memory_order_relaxed) * kIdBlock;
}

DecisionLog::Producer& DecisionLog::make_producer(std::size_t capacity) {
  producers_.push_back(std::make_unique<Producer>(capacity));
  producers_.back()->owner_ = this;
  return *producers_.back();
}

void DecisionLog::start() {
  writer_ = std::thread([this] {
    name_this_thread("vp-log");
    run();
  });
}

void DecisionLog::stop() {
  if (!writer_.joinable()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  wake();
  writer_.join();
  stopped_.store(true, std::memory_order_release);
}

std::size_t DecisionLog::drain_once() {
  DecisionRecord r;
  batch_.clear();
  batch_ends_.clear();
  for (auto& p : producers_) {
    while (batch_ends_.size() < kBatch && p->pop(r)) {
      if (observer_) observer_(r);
      append_json_line(batch_, r);
      p->give_back(r);
      batch_ends_.push_back(batch_.size());
      if (batch_ends_.size() % kYieldEvery == 0 && waiting() <= kPollBatch) {
        sched_yield();
        yields_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  const std::size_t n = batch_ends_.size();
  if (n == 0) return 0;
  write_batch();
  {
    std::lock_guard lock(ring_mu_);  // once per batch, not per record
    std::size_t start = 0;
    for (const std::size_t end : batch_ends_) {
      ring_.push(next_seq_++, std::string_view(batch_).substr(start, end - start));
      start = end;
    }
  }
  written_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void DecisionLog::run() {
  // Polling while records come keeps producers free of any wake-up syscall, and
  // PollSchedule::kPollMax bounds the log's latency. Once the queues have stayed empty for
  // kParkAfter the writer parks; the first push after that wakes it (one futex wake per
  // idle spell, not per record).
  PollSchedule schedule;
  std::size_t found = 0;  // records taken since the last sleep
  for (;;) {
    bool stopping = stopping_.load(std::memory_order_seq_cst);
    if (reopen_.exchange(false, std::memory_order_acq_rel) && !path_.empty()) {
      close_file();  // a rotation by someone else (logrotate): start PATH anew
      broken_line_ = false;
      if (!open_file()) note_write_failure(0, errno);
    }
    if (const std::size_t n = drain_once(); n != 0) {
      found += n;
      continue;
    }
    if (to_stdout_) std::fflush(stdout);
    if (stopping) break;
    const auto next = schedule.after_pass(found);
    found = 0;
    if (!next.park) {
      std::this_thread::sleep_for(next.sleep);
      wakeups_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    asleep_.store(1, std::memory_order_seq_cst);
    if (queues_empty() && !stopping_.load(std::memory_order_seq_cst) &&
        !reopen_.load(std::memory_order_seq_cst)) {
      parked_.store(true, std::memory_order_release);
      asleep_.wait(1, std::memory_order_seq_cst);  // until wake() stores 0
      parked_.store(false, std::memory_order_release);
      wakeups_.fetch_add(1, std::memory_order_relaxed);
    }
    asleep_.store(0, std::memory_order_relaxed);
    schedule.woke_from_park();
  }
}

std::uint64_t DecisionLog::dropped() const {
  std::uint64_t n = 0;
  for (const auto& p : producers_) n += p->dropped();
  return n;
}

std::uint64_t DecisionLog::last_seq() const {
  std::lock_guard lock(ring_mu_);
  return next_seq_ - 1;
}

std::vector<DecisionLog::RingEntry> DecisionLog::since(std::uint64_t after, std::size_t limit,
                                                       std::uint64_t& lost) const {
  std::lock_guard lock(ring_mu_);
  std::vector<RingEntry> out;
  lost = 0;
  // Records numbered up to next_seq_ - 1 were written; those before the ring's first are gone.
  const std::uint64_t first = ring_.empty() ? next_seq_ : ring_.first_seq();
  if (after + 1 < first) lost = first - (after + 1);
  const std::uint64_t start = after < first ? 0 : after - first + 1;
  for (auto i = start; i < ring_.size() && out.size() < limit; ++i) {
    out.push_back({first + i, ring_.line(static_cast<std::size_t>(i))});
  }
  return out;
}

}  // namespace vibepit::runtime
