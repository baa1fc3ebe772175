// The pure parts of the Docker client: DOCKER_HOST, API versions, error bodies, the
// multiplexed attach stream, progress lines.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "vibepit/docker/error.hpp"
#include "vibepit/docker/wire.hpp"

using namespace vibepit::docker;

TEST(DockerHost, Table) {
  struct Row {
    const char* value;
    const char* path;  // nullptr: an error
  };
  const Row rows[] = {
      {nullptr, "/var/run/docker.sock"},  // unset: the default socket
      {"", "/var/run/docker.sock"},       // empty: the same
      {"unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock"},  // rootless
      {"unix:///var/run/docker.sock", "/var/run/docker.sock"},
      {"unix://", nullptr},               // no path
      {"unix://relative.sock", nullptr},  // not absolute
      {"tcp://127.0.0.1:2375", nullptr},  // only Unix sockets
      {"ssh://user@host", nullptr},
      {"npipe:////./pipe/docker_engine", nullptr},
      {"/var/run/docker.sock", nullptr},  // no scheme
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.value ? r.value : "(unset)");
    if (r.path) {
      EXPECT_EQ(socket_path_from_docker_host(r.value), r.path);
    } else {
      try {
        socket_path_from_docker_host(r.value);
        ADD_FAILURE() << "accepted";
      } catch (const DockerError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::unsupported);
        EXPECT_NE(std::string(e.what()).find(r.value), std::string::npos) << e.what();
      }
    }
  }
}

TEST(EngineSocketsTest, DockerHostAloneElseDockerThenPodmanRootfulThenRootless) {
  using V = std::vector<std::string>;
  // As the docker CLI: a DOCKER_HOST that is set is the only place looked at.
  EXPECT_EQ(engine_sockets("unix:///tmp/e.sock", "/run/user/1000"), V{"/tmp/e.sock"});
  EXPECT_THROW(engine_sockets("tcp://127.0.0.1:2375", "/run/user/1000"), DockerError);
  const V rootful = {"/var/run/docker.sock", "/run/podman/podman.sock"};
  EXPECT_EQ(engine_sockets(nullptr, nullptr), rootful);
  EXPECT_EQ(engine_sockets("", ""), rootful);
  EXPECT_EQ(engine_sockets(nullptr, "run/user/1000"), rootful);  // not absolute: ignored
  EXPECT_EQ(
      engine_sockets(nullptr, "/run/user/1000"),
      (V{"/var/run/docker.sock", "/run/podman/podman.sock", "/run/user/1000/podman/podman.sock"}));
}

TEST(ApiVersionTest, ParseAndNegotiate) {
  EXPECT_EQ(parse_api_version("1.41"), (ApiVersion{1, 41}));
  EXPECT_EQ(parse_api_version("1.4"), (ApiVersion{1, 4}));
  EXPECT_FALSE(parse_api_version("1."));
  EXPECT_FALSE(parse_api_version("1"));
  EXPECT_FALSE(parse_api_version("v1.41"));
  EXPECT_FALSE(parse_api_version("1.41.2"));
  EXPECT_FALSE(parse_api_version(""));
  EXPECT_LT((ApiVersion{1, 9}), (ApiVersion{1, 41}));

  EXPECT_EQ(negotiate_api("1.41", "1.12"), (ApiVersion{1, 41}));  // Debian 12's docker.io
  EXPECT_EQ(negotiate_api("1.50", "1.24"), (ApiVersion{1, 41}));  // newer: we speak 1.41
  try {
    negotiate_api("1.40", "1.12");
    ADD_FAILURE() << "a 1.40 daemon was accepted";
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("API 1.40"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1.41"), std::string::npos) << e.what();
  }
  try {
    negotiate_api("1.60", "1.45");
    ADD_FAILURE() << "a daemon that dropped 1.41 was accepted";
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("1.45"), std::string::npos) << e.what();
  }
  EXPECT_THROW(negotiate_api("garbage", "1.12"), DockerError);
}

TEST(DaemonError, MessageAndKind) {
  EXPECT_EQ(daemon_error_message(409, R"({"message":"network with name x already exists"})"),
            "network with name x already exists");
  EXPECT_EQ(daemon_error_message(404, "page not found\n"), "page not found");
  EXPECT_EQ(daemon_error_message(500, ""), "the container engine answered HTTP 500");
  EXPECT_EQ(daemon_error_message(500, R"({"message":""})"), R"({"message":""})");
  EXPECT_EQ(kind_for_status(404), ErrorKind::not_found);
  EXPECT_EQ(kind_for_status(409), ErrorKind::conflict);
  EXPECT_EQ(kind_for_status(400), ErrorKind::bad_request);
  EXPECT_EQ(kind_for_status(304), ErrorKind::not_modified);
  EXPECT_EQ(kind_for_status(500), ErrorKind::server);
  EXPECT_EQ(kind_for_status(503), ErrorKind::server);
}

TEST(Query, Encoding) {
  EXPECT_EQ(url_encode("a-b_c.d~e"), "a-b_c.d~e");
  EXPECT_EQ(url_encode("LABEL a=b c"), "LABEL%20a%3Db%20c");
  EXPECT_EQ(url_encode("é"), "%C3%A9");
  EXPECT_EQ(encode_filters({{"label", {"dev.vibepit.session=ab"}}}),
            url_encode(R"({"label":["dev.vibepit.session=ab"]})"));
}

namespace {
std::string frame(std::uint8_t stream, const std::string& payload) {
  std::string f(8, '\0');
  f[0] = static_cast<char>(stream);
  const auto n = static_cast<std::uint32_t>(payload.size());
  f[4] = static_cast<char>(n >> 24);
  f[5] = static_cast<char>(n >> 16);
  f[6] = static_cast<char>(n >> 8);
  f[7] = static_cast<char>(n);
  return f + payload;
}
}  // namespace

TEST(StreamDemuxTest, EverySplitKeepsStreamsApart) {
  const std::string big(70'000, 'x');  // larger than one read
  const std::string wire =
      frame(1, "out one\n") + frame(2, "err\n") + frame(1, "") + frame(1, big) + frame(2, "tail");
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    StreamDemux d;
    std::string out, err;
    std::size_t pos = 0;
    while (pos < wire.size()) {
      const std::size_t n = round == 0 ? 1 : std::min<std::size_t>(wire.size() - pos, rng() % 300);
      ASSERT_TRUE(d.feed(std::string_view(wire).substr(pos, n),
                         [&](StreamDemux::Stream s, std::string_view p) {
                           (s == StreamDemux::Stream::stderr_ ? err : out).append(p);
                         }));
      pos += n;
    }
    EXPECT_EQ(out, "out one\n" + big);
    EXPECT_EQ(err, "err\ntail");
    EXPECT_TRUE(d.at_frame_boundary());
  }
}

TEST(StreamDemuxTest, BadHeaderFails) {
  auto sink = [](StreamDemux::Stream, std::string_view) {};
  StreamDemux bad_stream;
  EXPECT_FALSE(bad_stream.feed(frame(3, "x"), sink));  // no stream 3
  EXPECT_TRUE(bad_stream.failed());
  EXPECT_FALSE(bad_stream.feed(frame(1, "x"), sink));  // stays failed
  StreamDemux bad_pad;
  std::string f = frame(1, "x");
  f[2] = 1;
  EXPECT_FALSE(bad_pad.feed(f, sink));
  StreamDemux partial;
  EXPECT_TRUE(partial.feed(frame(1, "abc").substr(0, 9), sink));
  EXPECT_FALSE(partial.at_frame_boundary());
}

TEST(LineSplitterTest, LinesAndBound) {
  LineSplitter s(10);
  std::vector<std::string> lines;
  auto add = [&](std::string_view l) { lines.emplace_back(l); };
  EXPECT_TRUE(s.feed("a\nbc", add));
  EXPECT_TRUE(s.feed("d\n\nlast", add));
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "bcd", ""}));
  EXPECT_EQ(s.take_rest(), "last");
  EXPECT_EQ(s.take_rest(), "");
  EXPECT_FALSE(s.feed("0123456789A", add));  // 11 bytes and no newline
  LineSplitter t(10);
  EXPECT_TRUE(t.feed("01234", add));
  EXPECT_FALSE(t.feed("56789AB\n", add));  // the joined line is too long
}

TEST(ProgressTest, Messages) {
  auto p = parse_progress(R"({"stream":"Step 1/3 : FROM scratch\n"})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text, "Step 1/3 : FROM scratch");
  EXPECT_TRUE(p->error.empty());
  p = parse_progress(R"({"aux":{"ID":"sha256:abc"}})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->id, "sha256:abc");
  p = parse_progress(R"({"errorDetail":{"message":"COPY failed"},"error":"COPY failed: x"})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->error, "COPY failed: x");
  p = parse_progress(R"({"errorDetail":{"message":"only detail"}})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->error, "only detail");
  p = parse_progress(R"({"status":"Downloading","progress":"[==>  ] 1MB/2MB","id":"l1"})");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->text, "Downloading [==>  ] 1MB/2MB");
  EXPECT_EQ(p->id, "l1");
  EXPECT_FALSE(parse_progress("not json"));
  EXPECT_FALSE(parse_progress("[1,2]"));
}
