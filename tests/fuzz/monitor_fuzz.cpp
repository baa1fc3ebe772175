// libFuzzer target: vibepit monitor's model and screen over a decision stream (the hosts,
// names and reasons in it come from the sandbox) and a pending list. Every screen, at any
// size, is exactly its size and printable ASCII only: nothing in the input reaches the
// user's terminal as a control sequence. The model keeps its bound.
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "vibepit/launcher/monitor/screen.hpp"

using namespace vibepit::launcher::monitor;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  Model m;
  std::vector<Pending> pending;
  while (!in.empty()) {
    const auto nl = in.find('\n');
    const auto line = in.substr(0, nl);
    m.on_line(line);
    // A line's bytes also make a held request, as GET /v1/pending could list it.
    if (line.size() > 2 && pending.size() < 8) {
      pending.push_back({static_cast<std::uint64_t>(line[0]), static_cast<Proto>(line[1] % 3),
                         std::string(line.substr(2)), static_cast<std::uint16_t>(line.size()),
                         static_cast<std::int64_t>(line[0])});
    }
    in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
  }
  m.set_filter(size ? std::string(1, static_cast<char>(data[0])) : std::string());
  for (int pass = 0; pass < 2; ++pass) {
    for (auto [w, h] : {std::pair{80, 24}, {7, 3}, {200, 6}}) {
      const auto screen = layout(m, w, h, 1'796'551'210'000'000, std::string(in));
      CHECK(screen.size() == static_cast<std::size_t>(h));
      for (const auto& l : screen) {
        CHECK(l.text.size() == static_cast<std::size_t>(w));
        for (const char ch : l.text) {
          const auto c = static_cast<unsigned char>(ch);
          CHECK(c >= 0x20 && c < 0x7f);
        }
      }
    }
    m.set_pending(pending);
    m.toggle_allowed();
    m.move(size % 5);
  }
  CHECK(m.rows() <= Model::kMaxRows);
  return 0;
}
