#pragma once
// vibepit monitor's screen, laid out from the model as lines of text: what the terminal
// code draws, and what the tests read. Every line is exactly the terminal's width, and
// holds only printable ASCII: what came from the sandbox is escaped (terminal_text.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "vibepit/launcher/monitor/model.hpp"

namespace vibepit::launcher::monitor {

// How a line is drawn (colour, or with NO_COLOR only bold and reverse).
enum class Tone { status, header, held, denied, allowed, empty, message, help };

struct Line {
  std::string text;
  Tone tone = Tone::empty;
  bool selected = false;  // drawn in reverse video
};

// The whole screen for a terminal of `width` x `height` at wall-clock time `now_us`, with
// `message` (the last action's result, or the filter being typed) above the help line.
std::vector<Line> layout(const Model& m, int width, int height, std::int64_t now_us,
                         const std::string& message);

// "12s", "5m", "3h", "2d": how long ago, in at most 3 characters and a unit.
std::string age(std::int64_t us);

// A count kept short: exact below 100 000, then in thousands ("9999k"), then in millions
// ("45M").
std::string count_text(std::uint64_t n);

}  // namespace vibepit::launcher::monitor
