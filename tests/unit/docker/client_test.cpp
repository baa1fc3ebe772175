// The Docker client against a scripted daemon on a Unix socket: request shapes, versions,
// typed errors with the daemon's words, chunked and streamed bodies, deadlines, hijacking.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "fake_daemon.hpp"
#include "vibepit/docker/client.hpp"
#include "vibepit/docker/tar.hpp"

using namespace vibepit::docker;
using vibepit::docker::test::Answer;
using vibepit::docker::test::FakeDaemon;

namespace {

Client client_for(const FakeDaemon& d,
                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  ClientOptions o;
  o.socket_path = d.path();
  o.timeout = timeout;
  o.slow_timeout = timeout;
  return Client(o);
}

void script_version(FakeDaemon& d, const std::string& api) {
  d.answer(Answer{"HTTP/1.1 200 OK\r\nApi-Version: " + api + "\r\nContent-Length: 2\r\n\r\nOK"});
  d.answer(200, R"({"Version":"20.10.24","ApiVersion":")" + api +
                    R"(","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64"})");
}

// Podman 4.3's answer to negotiate(): its /_ping, whose headers say everything. A rootless
// engine's socket is its user's (root gives this one away).
void script_podman(FakeDaemon& d, bool rootless = false) {
  d.answer(
      Answer{"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nLibpod-Api-Version: 4.3.1\r\n"
             "Server: Libpod/4.3.1 (linux)\r\nContent-Length: 2\r\n\r\nOK"});
  if (rootless && ::geteuid() == 0) {
    EXPECT_EQ(::chown(d.path().c_str(), 4321, 4321), 0);
  }
}

}  // namespace

TEST(DockerClient, NegotiatesAndPrefixesEveryPath) {
  FakeDaemon d;
  script_version(d, "1.41");
  d.answer(200, R"([{"Id":"c1","Labels":{"dev.vibepit.session":"s1"}}])");
  auto c = client_for(d);
  auto v = c.negotiate();
  EXPECT_EQ(v.version, "20.10.24");
  EXPECT_EQ(v.negotiated, (ApiVersion{1, 41}));
  auto list = c.containers_by_label("dev.vibepit.session=s1");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["Id"], "c1");
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].target, "/_ping");
  EXPECT_EQ(seen[1].target, "/version");
  EXPECT_EQ(seen[2].method, "GET");
  EXPECT_EQ(seen[2].target, "/v1.41/containers/json?all=1&filters=" +
                                encode_filters({{"label", {"dev.vibepit.session=s1"}}}));
}

TEST(DockerClient, ThePingsHeadersNameTheEngineWithoutVersion) {
  FakeDaemon d;
  d.answer(
      Answer{"HTTP/1.1 200 OK\r\nApi-Version: 1.43\r\nServer: Docker/20.10.24+dfsg1 (linux)\r\n"
             "Content-Length: 2\r\n\r\nOK"});
  auto c = client_for(d);
  auto v = c.negotiate();
  EXPECT_EQ(v.engine, EngineKind::docker);
  EXPECT_EQ(v.version, "20.10.24+dfsg1");
  EXPECT_EQ(v.negotiated, (ApiVersion{1, 41}));
  EXPECT_EQ(d.seen().size(), 1u);  // no /version

  FakeDaemon p;
  script_podman(p);
  auto pc = client_for(p);
  EXPECT_EQ(pc.negotiate().engine, EngineKind::podman);
  EXPECT_EQ(pc.version().version, "4.3.1");
}

TEST(DockerClient, RefusesAnOldDaemonNamingItsVersion) {
  FakeDaemon d;
  script_version(d, "1.40");
  auto c = client_for(d);
  try {
    c.negotiate();
    FAIL() << "accepted API 1.40";
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("1.40"), std::string::npos) << e.what();
  }
}

TEST(DockerClient, DaemonErrorsAreTypedAndKeepTheMessage) {
  FakeDaemon d;
  d.answer(409, R"({"message":"network with name vp-x already exists"})");
  d.answer(404, R"({"message":"No such image: nope:latest"})");
  d.answer(404, R"({"message":"No such container: gone"})");
  d.answer(500, "");
  auto c = client_for(d);
  try {
    c.network_create({{"Name", "vp-x"}});
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::conflict);
    EXPECT_EQ(e.status(), 409);
    EXPECT_STREQ(e.what(), "network with name vp-x already exists");
  }
  EXPECT_FALSE(c.image_inspect("nope:latest"));  // 404 on inspect: absent, not an error
  try {
    c.container_remove("gone");
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_found);
    EXPECT_STREQ(e.what(), "No such container: gone");
  }
  try {
    c.volume_create({{"Name", "v"}});
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::server);
    EXPECT_STREQ(e.what(), "the container engine answered HTTP 500");
  }
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].target, "/v1.41/networks/create");
  EXPECT_EQ(seen[0].header("Content-Type"), "application/json");
  EXPECT_EQ(nlohmann::json::parse(seen[0].body)["Name"], "vp-x");
  EXPECT_EQ(seen[2].method, "DELETE");
  EXPECT_EQ(seen[2].target, "/v1.41/containers/gone?v=1&force=1");
}

TEST(DockerClient, ChunkedJsonAnswer) {
  FakeDaemon d;
  d.answer_chunked(200, {R"({"Id":"n)", R"(et1","Name":"x"})", ""});
  auto c = client_for(d);
  auto j = c.network_inspect("net1");
  ASSERT_TRUE(j);
  EXPECT_EQ((*j)["Id"], "net1");
}

TEST(DockerClient, BuildStreamsProgressAndReturnsTheId) {
  FakeDaemon d;
  // Messages split across chunks, one chunk holding two messages.
  d.answer_chunked(
      200,
      {"{\"stream\":\"Step 1/2 : FROM scr", "atch\\n\"}\n{\"stream\":\" ---\\u003e\\n\"}\n",
       "{\"aux\":{\"ID\":\"sha256:feed\"}}\n", "{\"stream\":\"Successfully built feed\\n\"}\n"});
  TarWriter t;
  t.add_file("Dockerfile", "FROM scratch\n");
  const std::string tar = t.finish();
  auto c = client_for(d);
  std::vector<std::string> texts;
  auto id = c.image_build(tar, "vibepit-proxy:abc", {{"dev.vibepit.role", "proxy"}},
                          [&](const Progress& p) { texts.push_back(p.text); });
  EXPECT_EQ(id, "sha256:feed");
  EXPECT_EQ(texts, (std::vector<std::string>{"Step 1/2 : FROM scratch", " --->", "",
                                             "Successfully built feed"}));
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].header("Content-Type"), "application/x-tar");
  EXPECT_EQ(seen[0].body, tar);
  EXPECT_NE(seen[0].target.find("t=vibepit-proxy%3Aabc"), std::string::npos) << seen[0].target;
  EXPECT_NE(seen[0].target.find("labels=" + url_encode(R"({"dev.vibepit.role":"proxy"})")),
            std::string::npos);
  EXPECT_NE(seen[0].target.find("networkmode=none"), std::string::npos);
}

TEST(DockerClient, BuildErrorInTheStreamThrowsItsMessage) {
  FakeDaemon d;
  d.answer_chunked(200, {"{\"stream\":\"Step 1/1 : COPY x /\\n\"}\n",
                         "{\"errorDetail\":{\"message\":\"COPY failed: no source files\"},"
                         "\"error\":\"COPY failed: no source files\"}\n"});
  auto c = client_for(d);
  try {
    c.image_build("", "t", {}, nullptr);
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_STREQ(e.what(), "COPY failed: no source files");
  }
}

TEST(DockerClient, ImportStreamsTheBodyChunkedAndTagsTheImageByItsId) {
  FakeDaemon d;
  d.answer_chunked(200, {"{\"status\":\"sha256:0123\"}\n"});
  d.answer(201, "");
  d.answer(200, R"({"Id":"sha256:0123"})");  // Podman named it vibepit-base:latest, too
  d.answer(200, R"([{"Untagged":"vibepit-base:latest"}])");
  auto c = client_for(d);
  std::vector<std::string> pieces = {std::string(100'000, 'a'), "", std::string(3, 'b')};
  std::size_t next = 0;
  auto id = c.image_import(
      [&](std::string& out) {
        if (next == pieces.size()) return false;
        out = pieces[next++];
        return true;
      },
      "vibepit-base", "bookworm", {"LABEL dev.vibepit.role=base", "CMD [\"bash\"]"}, nullptr);
  EXPECT_EQ(id, "sha256:0123");
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].header("Transfer-Encoding"), "chunked");
  EXPECT_EQ(seen[0].body, pieces[0] + pieces[2]);
  EXPECT_NE(seen[0].target.find("fromSrc=-&repo=vibepit-base&tag=bookworm"), std::string::npos);
  EXPECT_NE(seen[0].target.find("changes=LABEL%20dev.vibepit.role%3Dbase"), std::string::npos);
  // Podman names an import REPO:latest whatever the tag asked: the id is tagged again.
  EXPECT_EQ(seen[1].method, "POST");
  EXPECT_EQ(seen[1].target, "/v1.41/images/sha256%3A0123/tag?repo=vibepit-base&tag=bookworm");
  // ... and that REPO:latest name, this image's, is taken off again.
  EXPECT_EQ(seen[2].target, "/v1.41/images/vibepit-base%3Alatest/json");
  EXPECT_EQ(seen[3].method, "DELETE");
  EXPECT_EQ(seen[3].target, "/v1.41/images/vibepit-base%3Alatest");
}

TEST(DockerClient, AnImportLeavesALatestNameOfAnotherImageAlone) {
  FakeDaemon d;
  d.answer_chunked(200, {"{\"status\":\"sha256:0123\"}\n"});
  d.answer(201, "");
  d.answer(200, R"({"Id":"sha256:9999"})");
  auto c = client_for(d);
  c.image_import([](std::string&) { return false; }, "r", "t", {}, nullptr);
  EXPECT_EQ(d.seen().size(), 3u);  // no DELETE
}

TEST(DockerClient, AnImportWithoutAnIdIsAnError) {
  FakeDaemon d;
  d.answer_chunked(200, {"{\"status\":\"done\"}\n"});
  auto c = client_for(d);
  EXPECT_THROW(c.image_import([](std::string&) { return false; }, "r", "t", {}, nullptr),
               DockerError);
}

// The daemon holds the connection for ten times the client's timeout and then closes it:
// a client that waited would see the close, a protocol error, not a timeout.
TEST(DockerClient, ASilentDaemonTimesOut) {
  FakeDaemon d;
  d.answer(Answer{"", 2000, nullptr});  // reads the request, answers nothing
  auto c = client_for(d, std::chrono::milliseconds(200));
  try {
    c.get("/info");
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::timeout);
  }
}

TEST(DockerClient, ATruncatedBodyIsAProtocolError) {
  FakeDaemon d;
  d.answer(Answer{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"Id\":"});
  auto c = client_for(d);
  try {
    c.get("/info");
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::protocol);
  }
}

TEST(DockerClient, NoDaemonSaysSo) {
  ClientOptions o;
  o.socket_path = "/nonexistent/vibepit/docker.sock";
  Client c(o);
  try {
    c.negotiate();
    FAIL();
  } catch (const DockerError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unavailable);
    EXPECT_STREQ(e.what(),
                 "cannot reach a container engine at /nonexistent/vibepit/docker.sock: no such "
                 "socket");
  }
}

TEST(DockerClient, ConnectFirstTakesTheFirstEngineThatAnswersAndKnowsPodman) {
  FakeDaemon podman;
  script_podman(podman, true);
  auto c = Client::connect_first({"/nonexistent/vibepit/docker.sock", podman.path()});
  EXPECT_EQ(c.version().engine, EngineKind::podman);
  EXPECT_EQ(c.version().version, "4.3.1");
  EXPECT_EQ(c.version().socket, podman.path());
  EXPECT_TRUE(c.version().rootless);  // its socket is not root's
  EXPECT_EQ(c.options().socket_path, podman.path());

  FakeDaemon docker;
  script_version(docker, "1.41");
  auto d = Client::connect_first({docker.path(), podman.path()});
  EXPECT_EQ(d.version().engine, EngineKind::docker);
  EXPECT_EQ(d.version().rootless, ::geteuid() != 0);
  EXPECT_EQ(podman.seen().size(), 1u);  // the second engine was never asked
}

TEST(DockerClient, OnPodmanAnInternalNetworkHasNoHostAddressAndNoDns) {
  FakeDaemon d;
  script_podman(d);
  d.answer(200, R"({"name":"n1","id":"abc"})");
  d.answer(201, R"({"Id":"def"})");
  d.answer(200, R"({"name":"n1","network_interface":"podman3"})");
  auto c = client_for(d);
  c.negotiate();
  const Json internal = {{"Name", "n1"},
                         {"Internal", true},
                         {"Options", {{"com.docker.network.bridge.inhibit_ipv4", "true"}}},
                         {"IPAM", {{"Config", {{{"Subnet", "10.9.0.0/28"}}}}}},
                         {"Labels", {{"dev.vibepit.session", "s1"}}}};
  EXPECT_EQ(c.network_create(internal), "abc");
  Json egress = internal;
  egress["Internal"] = false;
  EXPECT_EQ(c.network_create(egress), "def");  // the Docker API, as on Docker
  EXPECT_EQ(c.network_bridge("abc"), "podman3");
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[1].target, "/v4.0.0/libpod/networks/create");
  EXPECT_EQ(Json::parse(seen[1].body), (Json{{"name", "n1"},
                                             {"driver", "bridge"},
                                             {"internal", true},
                                             {"dns_enabled", false},
                                             {"ipv6_enabled", false},
                                             {"subnets", {{{"subnet", "10.9.0.0/28"}}}},
                                             {"labels", {{"dev.vibepit.session", "s1"}}}}));
  EXPECT_EQ(seen[2].target, "/v1.41/networks/create");
  EXPECT_EQ(Json::parse(seen[2].body), egress);
  EXPECT_EQ(seen[3].target, "/v4.0.0/libpod/networks/abc/json");
}

TEST(DockerClient, ConnectFirstNamesEverySocketTriedAndTheWaysOut) {
  try {
    Client::connect_first({"/nonexistent/vibepit/a.sock", "/nonexistent/vibepit/b.sock"});
    FAIL();
  } catch (const DockerError& e) {
    const std::string w = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::unavailable);
    EXPECT_NE(w.find("/nonexistent/vibepit/a.sock: no such socket"), std::string::npos) << w;
    EXPECT_NE(w.find("/nonexistent/vibepit/b.sock: no such socket"), std::string::npos) << w;
    EXPECT_NE(w.find("podman.socket"), std::string::npos) << w;
    EXPECT_NE(w.find("DOCKER_HOST=unix://"), std::string::npos) << w;
  }
  // An engine that answers but is too old is that engine's answer, not a reason to go on.
  FakeDaemon old;
  script_version(old, "1.40");
  FakeDaemon good;
  script_version(good, "1.41");
  EXPECT_THROW(Client::connect_first({old.path(), good.path()}), DockerError);
  EXPECT_TRUE(good.seen().empty());
}

TEST(DockerClient, AttachHijacksAndKeepsBytesAlreadyRead) {
  FakeDaemon d;
  Answer a;
  a.raw =
      "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
      "Connection: Upgrade\r\nUpgrade: tcp\r\n\r\nfirst bytes";
  a.after = [](int fd) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)!::write(fd, " later", 6);
    char b[16];
    (void)!::read(fd, b, sizeof b);  // the client's stdin
    (void)!::write(fd, b, 5);        // echoed back
  };
  d.answer(std::move(a));
  auto c = client_for(d);
  auto h = c.container_attach("abc", true, true, true);
  ASSERT_GE(h.fd, 0);
  std::string got = h.buffered;
  ASSERT_EQ(::write(h.fd, "input", 5), 5);
  char b[64];
  while (got.size() < std::string("first bytes laterinput").size()) {
    ssize_t n = ::read(h.fd, b, sizeof b);
    ASSERT_GT(n, 0);
    got.append(b, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(got, "first bytes laterinput");
  ::close(h.fd);
  auto seen = d.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].target, "/v1.41/containers/abc/attach?stream=1&stdin=1&stdout=1&stderr=1");
  EXPECT_EQ(seen[0].header("Upgrade"), "tcp");
  EXPECT_EQ(seen[0].header("Connection"), "Upgrade");
}

TEST(DockerClient, WaitReturnsTheExitStatus) {
  FakeDaemon d;
  d.answer(200, R"({"StatusCode":42,"Error":null})");
  d.answer(200, R"({"StatusCode":-1,"Error":{"Message":"container gone"}})");
  auto c = client_for(d);
  EXPECT_EQ(c.container_wait("abc"), 42);
  EXPECT_THROW(c.container_wait("abc"), DockerError);
  EXPECT_EQ(d.seen()[0].target, "/v1.41/containers/abc/wait?condition=not-running");
}
