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

// A rootless engine runs the agent in its user's namespace. Where the agent's files would not
// be the user's (rootless Docker; rootless Podman for another uid), start_session refuses
// once the engine has said what it is, before anything is asked of it or made.
namespace {

std::string refusal_on_rootless(const char* server, uid_t agent_uid) {
  using vibepit::docker::test::Answer;
  vibepit::docker::test::FakeDaemon d;
  d.answer(Answer{std::string("HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nServer: ") + server +
                  "\r\nContent-Length: 2\r\n\r\nOK"});
  // A rootless engine's socket is its user's.
  if (::geteuid() == 0) {
    EXPECT_EQ(::chown(d.path().c_str(), 4321, 4321), 0);
  }
  vibepit::docker::ClientOptions o;
  o.socket_path = d.path();
  vibepit::docker::Client c(o);
  c.negotiate();
  EXPECT_TRUE(c.version().rootless);
  SessionRequest req;
  req.project.root = std::filesystem::temp_directory_path();
  req.project.hash = "0123456789abcdef";
  req.sandbox.user = AgentUser{agent_uid, agent_uid};
  std::string why;
  try {
    start_session(c, req, nullptr, nullptr, nullptr);
    ADD_FAILURE() << "started on a rootless engine";
  } catch (const AgentUserRefused& e) {
    why = e.what();
  }
  EXPECT_EQ(d.seen().size(), 1u);  // /_ping: nothing after it
  return why;
}

uid_t engine_user() {
  return ::geteuid() == 0 ? 4321 : ::geteuid();
}

}  // namespace

TEST(StartSessionTest, RootlessDockerIsRefusedBeforeAnythingIsMade) {
  const auto why = refusal_on_rootless("Docker/20.10.24+dfsg1 (linux)", engine_user());
  EXPECT_NE(why.find("cannot map the agent's user to itself"), std::string::npos) << why;
}

TEST(StartSessionTest, RootlessPodmanForAnotherUserIsRefusedBeforeAnythingIsMade) {
  const auto why = refusal_on_rootless("Libpod/4.3.1 (linux)", engine_user() + 1);
  EXPECT_NE(why.find("can run the agent as its own user only"), std::string::npos) << why;
  EXPECT_NE(why.find("run vibepit as uid " + std::to_string(engine_user())), std::string::npos)
      << why;
}
