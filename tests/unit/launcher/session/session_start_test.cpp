// What a session's start-up reads from its settings before Docker is asked anything.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "../../docker/fake_daemon.hpp"
#include "vibepit/launcher/session/session_start.hpp"

using namespace vibepit::launcher;

TEST(RunOptionsTest, Memory) {
  EXPECT_EQ(parse_memory("4g"), 4LL << 30);
  EXPECT_EQ(parse_memory("512m"), 512LL << 20);
  EXPECT_EQ(parse_memory("1.5G"), 3LL << 29);
  EXPECT_EQ(parse_memory("67108864"), 64LL << 20);
  EXPECT_THROW(parse_memory("1m"), std::invalid_argument);  // below Docker's floor
  EXPECT_THROW(parse_memory("4x"), std::invalid_argument);
  EXPECT_THROW(parse_memory("lots"), std::invalid_argument);
}

// A rootless engine would map the agent onto a subordinate uid: refused once the engine
// has said what it is, before anything is asked of it or made.
TEST(StartSessionTest, ARootlessEngineIsRefusedBeforeAnythingIsMade) {
  using vibepit::docker::test::Answer;
  vibepit::docker::test::FakeDaemon d;
  d.answer(
      Answer{"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nServer: Libpod/4.3.1 (linux)\r\n"
             "Content-Length: 2\r\n\r\nOK"});
  // A rootless engine's socket is its user's.
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(d.path().c_str(), 4321, 4321), 0);
  }
  vibepit::docker::ClientOptions o;
  o.socket_path = d.path();
  vibepit::docker::Client c(o);
  c.negotiate();
  SessionRequest req;
  req.project.root = std::filesystem::temp_directory_path();
  req.project.hash = "0123456789abcdef";
  const bool root = ::getuid() == 0;
  req.sandbox.user = AgentUser{root ? 4321u : ::getuid(), root ? 4321u : ::getgid()};
  try {
    start_session(c, req, nullptr, nullptr, nullptr);
    FAIL() << "started on a rootless engine";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rootless podman at " + d.path() + " is not supported"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(d.seen().size(), 1u);  // /_ping: nothing after it
}
