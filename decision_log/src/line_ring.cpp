#include "vibepit/decision_log/line_ring.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace vibepit::decision_log {
namespace {
constexpr std::size_t kFirstBytes = 64 * 1024;  // the buffer's first size, when it can hold it
constexpr std::size_t kFirstSpans = 64;

// A ring of `cap` bytes stores logical position p at p % cap.
void write_wrapped(char* ring, std::size_t cap, std::uint64_t p, const char* from, std::size_t n) {
  while (n > 0) {
    const std::size_t at = p % cap, run = std::min(n, cap - at);
    std::memcpy(ring + at, from, run);
    p += run;
    from += run;
    n -= run;
  }
}

void read_wrapped(const char* ring, std::size_t cap, std::uint64_t p, char* to, std::size_t n) {
  while (n > 0) {
    const std::size_t at = p % cap, run = std::min(n, cap - at);
    std::memcpy(to, ring + at, run);
    p += run;
    to += run;
    n -= run;
  }
}
}  // namespace

LineRing::LineRing(std::size_t max_lines, std::size_t max_bytes)
    : max_lines_(std::max<std::size_t>(max_lines, 1)),
      max_bytes_(std::max<std::size_t>(max_bytes, 1)) {}

void LineRing::push(std::uint64_t seq, std::string_view line) {
  if (line.size() > max_bytes_ || line.size() > std::numeric_limits<std::uint32_t>::max()) {
    while (count_ > 0) pop_oldest();
    first_seq_ = seq + 1;
    return;
  }
  if (count_ == 0) first_seq_ = seq;
  if (count_ == max_lines_) pop_oldest();
  while (bytes() + line.size() > cap_) {
    if (cap_ < max_bytes_) {
      grow_bytes(bytes() + line.size());
    } else {
      pop_oldest();
    }
  }
  if (count_ == spans_.size()) grow_spans();
  write_wrapped(buf_.get(), cap_, end_, line.data(), line.size());
  span(count_++) = Span{end_, static_cast<std::uint32_t>(line.size())};
  end_ += line.size();
}

std::string LineRing::line(std::size_t i) const {
  const Span& s = span(i);
  std::string out(s.size, '\0');
  read_wrapped(buf_.get(), cap_, s.begin, out.data(), s.size);
  return out;
}

void LineRing::pop_oldest() {
  const Span& s = span(0);
  begin_ = s.begin + s.size;
  head_ = (head_ + 1) % spans_.size();
  --count_;
  ++first_seq_;
  if (count_ == 0) begin_ = end_;
}

void LineRing::grow_bytes(std::size_t need) {
  std::size_t cap = std::max(cap_, std::min(kFirstBytes, max_bytes_));
  while (cap < need && cap < max_bytes_) cap = cap > max_bytes_ / 2 ? max_bytes_ : cap * 2;
  cap = std::min(cap, max_bytes_);
  // Uninitialised: the kernel backs a page only when a line is first written to it.
  std::unique_ptr<char[]> buf(new char[cap]);
  // The live bytes keep their logical positions: [begin_, end_) is at most `cap` long, so it
  // maps onto the new ring without overlap, wrapped where the new size puts the end.
  for (std::uint64_t p = begin_; p < end_;) {
    const std::size_t at = p % cap_;
    const std::size_t run = std::min<std::uint64_t>(end_ - p, cap_ - at);
    write_wrapped(buf.get(), cap, p, buf_.get() + at, run);
    p += run;
  }
  buf_ = std::move(buf);
  cap_ = cap;
}

void LineRing::grow_spans() {
  const std::size_t n =
      spans_.empty() ? std::min(kFirstSpans, max_lines_) : std::min(max_lines_, spans_.size() * 2);
  std::vector<Span> spans;
  spans.reserve(n);
  for (std::size_t i = 0; i < count_; ++i) spans.push_back(span(i));
  spans.resize(n);
  spans_ = std::move(spans);
  head_ = 0;
}

}  // namespace vibepit::decision_log
