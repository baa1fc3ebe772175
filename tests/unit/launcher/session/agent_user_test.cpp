// Who the agent runs as: the invoking user, or under root the project's owner or --user;
// never root, and never someone a non-root vibepit cannot write for.
#include "vibepit/launcher/session/agent_user.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

using namespace vibepit::launcher;

namespace {

AgentUserFacts facts(uid_t invoker, uid_t owner, gid_t owner_gid,
                     std::optional<AgentUser> requested = std::nullopt) {
  AgentUserFacts f;
  f.invoker_uid = invoker;
  f.invoker_gid = invoker == 0 ? 0 : invoker + 1;
  f.owner_uid = owner;
  f.owner_gid = owner_gid;
  f.project = "/src/app";
  f.requested = requested;
  return f;
}

std::string refusal(const AgentUserFacts& f) {
  try {
    choose_agent_user(f);
  } catch (const AgentUserRefused& e) {
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

}  // namespace

TEST(AgentUserTest, UserOption) {
  EXPECT_EQ(parse_user_option("4321"), (AgentUser{4321, 4321}));
  EXPECT_EQ(parse_user_option("4321:100"), (AgentUser{4321, 100}));
  EXPECT_EQ(parse_user_option("0"), (AgentUser{0, 0}));  // parses; refused by the rule
  EXPECT_EQ(parse_user_option("4294967294"), (AgentUser{4294967294U, 4294967294U}));
  for (const char* bad : {"", ":", "4321:", ":100", "alice", "4321:staff", "-1", "+5", " 5", "5 ",
                          "4294967295", "4294967296", "99999999999", "1:2:3", "0x10"})
    EXPECT_THROW(parse_user_option(bad), std::invalid_argument) << bad;
}

TEST(AgentUserTest, RootTakesTheProjectsOwner) {
  // sudo vibepit run on a project owned by 4321: the agent is 4321, with the project's group.
  EXPECT_EQ(choose_agent_user(facts(0, 4321, 4322)), (AgentUser{4321, 4322}));
  // --user wins over the owner.
  EXPECT_EQ(choose_agent_user(facts(0, 4321, 4322, AgentUser{5000, 5001})),
            (AgentUser{5000, 5001}));
  // A root-owned project with --user: the agent is that user (the project stays root's).
  EXPECT_EQ(choose_agent_user(facts(0, 0, 0, AgentUser{4321, 4321})), (AgentUser{4321, 4321}));
}

TEST(AgentUserTest, AnOrdinaryUserRunsTheAgentAsThemselves) {
  // The project filter writes as vibepit's user, so the owner does not change who the agent is.
  EXPECT_EQ(choose_agent_user(facts(1000, 1000, 1000)), (AgentUser{1000, 1001}));
  EXPECT_EQ(choose_agent_user(facts(1000, 4321, 4321)), (AgentUser{1000, 1001}));
  EXPECT_EQ(choose_agent_user(facts(1000, 0, 0)), (AgentUser{1000, 1001}));
  EXPECT_EQ(choose_agent_user(facts(1000, 1000, 1000, AgentUser{1000, 50})), (AgentUser{1000, 50}));
  const std::string why = refusal(facts(1000, 1000, 1000, AgentUser{4321, 4321}));
  EXPECT_NE(why.find("vibepit runs as uid 1000"), std::string::npos) << why;
}

TEST(AgentUserTest, NeverRoot) {
  // A root-owned project under root, without --user: refused, naming the owner and the ways out.
  std::string why = refusal(facts(0, 0, 0));
  EXPECT_NE(why.find("/src/app is owned by 0:0"), std::string::npos) << why;
  EXPECT_NE(why.find("chown -R UID:GID /src/app"), std::string::npos) << why;
  EXPECT_NE(why.find("--user UID:GID"), std::string::npos) << why;
  // Root's group is root's too.
  why = refusal(facts(0, 4321, 0));
  EXPECT_NE(why.find("owned by 4321:0"), std::string::npos) << why;
  // --user 0, from root or from anyone, with the same explanation.
  for (uid_t invoker : {0U, 1000U}) {
    why = refusal(facts(invoker, 4321, 4321, AgentUser{0, 0}));
    EXPECT_NE(why.find("never runs as root"), std::string::npos) << why;
    EXPECT_NE(why.find("chown -R UID:GID /src/app"), std::string::npos) << why;
  }
  EXPECT_NE(refusal(facts(0, 4321, 4321, AgentUser{4321, 0})).find("root's group"),
            std::string::npos);
}

// A rootful engine runs any agent; a rootless one only its own user, and only where it can
// map that user to itself (Podman's keep-id).
TEST(AgentUserTest, ARootlessEngineRunsOnlyItsOwnUserAndOnlyWhereItKeepsIds) {
  using vibepit::docker::EngineKind;
  using vibepit::docker::traits_of;
  vibepit::docker::VersionInfo v;
  v.engine = EngineKind::podman;
  v.socket = "/run/user/4321/podman/podman.sock";
  v.rootless = false;
  EXPECT_NO_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {4321, 4321}));
  EXPECT_NO_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {5000, 5000}));
  v.rootless = true;
  v.socket_uid = 4321;
  EXPECT_NO_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {4321, 4321}));
  EXPECT_NO_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {4321, 100}));
  EXPECT_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {5000, 4321}), AgentUserRefused);
  v.engine = EngineKind::docker;
  EXPECT_THROW(check_engine_keeps_ids(v, traits_of(v.engine), {4321, 4321}), AgentUserRefused);
}

TEST(AgentUserTest, KeepIdOnlyOnARootlessPodman) {
  EXPECT_STREQ(
      vibepit::docker::traits_of(vibepit::docker::EngineKind::podman).rootless_userns_keeping_ids,
      "keep-id");
  EXPECT_STREQ(
      vibepit::docker::traits_of(vibepit::docker::EngineKind::docker).rootless_userns_keeping_ids,
      "");
  vibepit::docker::Client rootful;  // not negotiated: Docker, rootful
  EXPECT_EQ(rootless_userns(rootful), nullptr);
}
