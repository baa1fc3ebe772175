#pragma once
// The decision log's in-memory ring: the newest lines of text, numbered by a sequence that
// rises by one a line, held in one circular byte buffer. It keeps at most `max_lines` lines
// and `max_bytes` bytes; the oldest lines go first. The buffer grows (doubling) to the size
// the lines need and then stays: adding a line allocates nothing, so a log writing a
// hundred thousand records a second neither churns nor fragments the heap, and the memory
// it holds does not move with the length of the lines, as one heap string per line did.
// Not thread-safe: the owner locks.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::decision_log {

class LineRing {
 public:
  LineRing(std::size_t max_lines, std::size_t max_bytes);

  // Appends the line numbered `seq`, which must be last_seq() + 1 unless the ring is empty.
  // A line longer than max_bytes is not kept: the ring is emptied and starts after it.
  void push(std::uint64_t seq, std::string_view line);

  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::uint64_t first_seq() const { return first_seq_; }  // the oldest line's, when not empty
  std::uint64_t last_seq() const { return first_seq_ + count_ - 1; }
  std::string line(std::size_t i) const;  // i = 0 is the oldest
  std::size_t bytes() const { return static_cast<std::size_t>(end_ - begin_); }
  std::size_t capacity_bytes() const { return cap_; }

 private:
  struct Span {
    std::uint64_t begin;  // a logical byte position: stored at begin % cap_
    std::uint32_t size;
  };
  void pop_oldest();
  void grow_bytes(std::size_t need);
  void grow_spans();
  Span& span(std::size_t i) { return spans_[(head_ + i) % spans_.size()]; }
  const Span& span(std::size_t i) const { return spans_[(head_ + i) % spans_.size()]; }

  std::size_t max_lines_, max_bytes_;
  std::unique_ptr<char[]> buf_;
  std::size_t cap_ = 0;
  std::uint64_t begin_ = 0, end_ = 0;  // logical positions of the live bytes
  std::vector<Span> spans_;            // circular: count_ spans from head_
  std::size_t head_ = 0, count_ = 0;
  std::uint64_t first_seq_ = 1;
};

}  // namespace vibepit::decision_log
