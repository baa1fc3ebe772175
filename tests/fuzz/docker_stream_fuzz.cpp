// libFuzzer target: what the Docker client reads from the daemon and from containers: the
// multiplexed attach stream (container output is the sandbox's to choose), progress lines,
// error bodies and version strings. A split feed must give what a whole feed gives.
#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "vibepit/docker/error.hpp"
#include "vibepit/docker/wire.hpp"

using namespace vibepit::docker;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto demux = [&](std::size_t cut, std::string& out, std::string& err) {
    StreamDemux d;
    auto sink = [&](StreamDemux::Stream s, std::string_view p) {
      (s == StreamDemux::Stream::stderr_ ? err : out).append(p);
    };
    bool ok = d.feed(in.substr(0, cut), sink);
    if (ok) ok = d.feed(in.substr(cut), sink);
    return ok;
  };
  std::string out1, err1, out2, err2;
  const bool ok1 = demux(size, out1, err1);
  const bool ok2 = demux(size / 3, out2, err2);
  CHECK(ok1 == ok2);
  if (ok1) {
    CHECK(out1 == out2);
    CHECK(err1 == err2);
    CHECK(out1.size() + err1.size() <= size);
  }

  LineSplitter lines(4096);
  std::size_t total = 0;
  if (lines.feed(in, [&](std::string_view l) {
        total += l.size() + 1;
        if (auto p = parse_progress(l)) CHECK(p->text.size() <= l.size());
      })) {
    CHECK(total + lines.take_rest().size() == size);
  }
  (void)daemon_error_message(500, in);
  try {
    auto v = negotiate_api(in.substr(0, size / 2), in.substr(size / 2));
    CHECK(v >= kMinimumApi && v <= kPreferredApi);
  } catch (const DockerError&) {
  }
  try {
    const std::string host(in);
    if (host.find('\0') == std::string::npos) {
      auto path = socket_path_from_docker_host(host.c_str());
      CHECK(!path.empty() && path.front() == '/');
    }
  } catch (const DockerError& e) {
    CHECK(e.kind() == ErrorKind::unsupported);
  }
  return 0;
}
