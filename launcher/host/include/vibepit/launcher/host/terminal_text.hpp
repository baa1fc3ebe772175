#pragma once
// Text that came from the sandbox (host names, DNS names, targets, reasons), made safe to
// write to the user's terminal: nothing in the result can be a control sequence, so the
// agent cannot move the cursor, clear the screen, set the window title or reach the
// terminal in any other way through what vibepit shows (vibepit logs, vibepit monitor).
#include <string>
#include <string_view>

namespace vibepit::launcher {

// Printable ASCII passes, a backslash doubled; every other byte (controls, DEL, and every
// byte of a non-ASCII character: host names travel as punycode) is written \xNN.
std::string terminal_safe(std::string_view text);

}  // namespace vibepit::launcher
