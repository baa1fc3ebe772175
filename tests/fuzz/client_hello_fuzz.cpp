// libFuzzer target: the ClientHello reader (tls/). The verdict and the name do not depend on
// how the bytes are split: the input is read whole, and again in pieces whose sizes come
// from its first byte. A verdict stays once given, and a name is only read from a whole,
// well-formed ClientHello within the bounds.
#include <cstdint>
#include <string_view>

#include "fuzz_check.hpp"
#include "vibepit/tls/client_hello.hpp"

using namespace vibepit::tls;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = data[0] % 64 + 1;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);

  const HelloReader whole = read_client_hello(in);
  HelloReader split;
  for (std::size_t at = 0; at < in.size() && split.status() == HelloStatus::need_more;
       at += piece) {
    split.feed(in.substr(at, piece));
  }
  CHECK(whole.status() == split.status());
  CHECK(whole.has_server_name() == split.has_server_name());
  CHECK(whole.server_name() == split.server_name());
  CHECK(whole.has_ech() == split.has_ech());
  CHECK(whole.bytes_seen() <= in.size());

  if (whole.has_server_name()) {
    CHECK(whole.status() == HelloStatus::complete);
    CHECK(!whole.server_name().empty() && whole.server_name().size() <= 0xffff);
    CHECK(same_name(whole.server_name(), whole.server_name()));
    const std::string q = quoted_name(whole.server_name());
    for (char c : q) CHECK(c >= 0x20 && c < 0x7f);
  }
  if (whole.status() == HelloStatus::complete) CHECK(whole.bytes_seen() <= kMaxHelloBytes);
  if (whole.status() == HelloStatus::malformed || whole.status() == HelloStatus::too_large) {
    CHECK(!whole.error().empty());
  }
  // Bytes after a verdict change nothing.
  HelloReader more = whole;
  more.feed(in);
  CHECK(more.status() == whole.status() || whole.status() == HelloStatus::need_more);
  return 0;
}
