#include "vibepit/launcher/host/terminal_text.hpp"

#include <gtest/gtest.h>

namespace vibepit::launcher {
namespace {

struct Case {
  std::string_view in, out;
};

TEST(TerminalSafe, NothingThatReachesTheTerminalIsAControl) {
  const Case cases[] = {
      {"api.github.com:443", "api.github.com:443"},  // as is
      {"\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"},    // OSC: window title
      {"a\x1b[2Jb", "a\\x1b[2Jb"},                   // CSI: clear screen
      {"\xc2\x9b"
       "2J",
       "\\xc2\\x9b2J"},  // C1 CSI in UTF-8
      {"\x9b"
       "2J",
       "\\x9b2J"},                                                   // C1 CSI as one byte
      {"line\r\nnext\ttab\x7f", "line\\x0d\\x0anext\\x09tab\\x7f"},  // CR LF TAB DEL
      {"\xe2\x80\xae"
       "gnp.exe",
       "\\xe2\\x80\\xaegnp.exe"},                          // bidi override
      {std::string_view("nul\0byte", 8), "nul\\x00byte"},  // NUL
      {"back\\x1b", "back\\\\x1b"},  // a literal backslash cannot fake an escape
  };
  for (const auto& c : cases) EXPECT_EQ(terminal_safe(c.in), c.out) << c.out;
  std::string every;
  for (int b = 0; b < 256; ++b) every += static_cast<char>(b);
  for (const char ch : terminal_safe(every)) {
    const auto c = static_cast<unsigned char>(ch);
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << int(c);
  }
}

}  // namespace
}  // namespace vibepit::launcher
