// libFuzzer target: authorities and request targets. What parses must display in a form
// that parses back to the same host, address and port.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "vibepit/http/authority.hpp"

namespace {

using namespace vibepit::http;

void check_authority(const Authority& a) {
  CHECK(!a.host.empty());
  CHECK(a.port != 0);
  if (!a.ip) {
    CHECK(a.host.size() <= 253);
    CHECK(a.host.back() != '.');
    for (char c : a.host) {
      CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_');
    }
  } else {
    CHECK(a.ip->to_string() == a.host);
  }
  const auto again = parse_authority(a.display(), std::nullopt);
  const auto* b = std::get_if<Authority>(&again);
  CHECK(b != nullptr);
  CHECK(b->host == a.host && b->port == a.port && b->ip == a.ip);
  CHECK(b->display() == a.display());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // What a record keeps of a target that did not parse: a piece of it, bounded, with no
  // path, query, fragment or userinfo left.
  const std::string_view kept = authority_text(in);
  CHECK(kept.size() <= 256);
  CHECK(kept.empty() ||
        (kept.data() >= in.data() && kept.data() + kept.size() <= in.data() + in.size()));
  CHECK(kept.find_first_of("/?#@") == std::string_view::npos);
  for (const auto default_port :
       {std::optional<std::uint16_t>{}, std::optional<std::uint16_t>{80}}) {
    const auto r = parse_authority(in, default_port);
    if (const auto* a = std::get_if<Authority>(&r)) {
      check_authority(*a);
      if (!default_port) CHECK(in.find(':') != std::string_view::npos);
    } else {
      CHECK(!std::get<TargetError>(r).what.empty());
    }
  }
  for (const std::string_view method : {"CONNECT", "GET", "OPTIONS"}) {
    const auto r = parse_target(method, in);
    const auto* t = std::get_if<Target>(&r);
    if (t == nullptr) {
      CHECK(!std::get<TargetError>(r).what.empty());
      continue;
    }
    switch (t->form) {
      case TargetForm::authority:
        CHECK(method == "CONNECT");
        check_authority(t->authority);
        break;
      case TargetForm::asterisk:
        CHECK(method == "OPTIONS" && in == "*");
        break;
      case TargetForm::origin:
        CHECK(t->path == in && !in.empty() && in.front() == '/');
        break;
      case TargetForm::absolute: {
        check_authority(t->authority);
        CHECK(!t->path.empty() && t->path.front() == '/');
        CHECK(in.find('#') == std::string_view::npos);
        const std::size_t auth_start = in.find("://") + 3;
        const std::string_view auth =
            in.substr(auth_start, in.find_first_of("/?", auth_start) - auth_start);
        CHECK(auth.find('@') == std::string_view::npos && !auth.empty());
        // Rebuilt from its parts, the target parses to the same thing.
        const std::string rebuilt = t->scheme + "://" + t->authority.display() + t->path;
        const auto again = parse_target(method, rebuilt);
        const auto* u = std::get_if<Target>(&again);
        CHECK(u != nullptr);
        CHECK(u->scheme == t->scheme && u->path == t->path);
        CHECK(u->authority.host == t->authority.host && u->authority.port == t->authority.port);
        break;
      }
    }
  }
  return 0;
}
