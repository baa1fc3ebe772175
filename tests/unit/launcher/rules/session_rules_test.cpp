// Where a session's rules come from: presets, the approved part of network.yaml, flags.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "vibepit/launcher/host/embedded_files.hpp"
#include "vibepit/launcher/rules/session_rules.hpp"

using namespace vibepit::launcher;
namespace fs = std::filesystem;

TEST(Presets, EveryPresetIsValidAndExplained) {
  const std::vector<std::string> required = {"anthropic", "crates", "debian", "github",
                                             "go",        "npm",    "openai", "pypi"};
  const auto names = preset_names();
  for (const auto& r : required)
    EXPECT_NE(std::find(names.begin(), names.end(), r), names.end()) << r;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    auto p = load_preset(n);
    EXPECT_FALSE(p.allow_http.empty());
    EXPECT_FALSE(p.allow_dns.empty());
    EXPECT_NO_THROW(merge_rules({{"preset " + n, p}}));  // every entry follows the grammar
    // Each entry carries a comment saying why it is there.
    std::istringstream text(embedded_files().at("presets/" + n + ".yaml"));
    for (std::string line; std::getline(text, line);)
      if (line.rfind("  - ", 0) == 0) {
        EXPECT_NE(line.find('#'), std::string::npos) << line;
      }
  }
  try {
    load_preset("nope");
    FAIL();
  } catch (const RulesError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset \"nope\""), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("github"), std::string::npos) << e.what();
  }
}

TEST(MergeRules, CanonicalOnceAndErrorsNameTheSource) {
  NetworkFile file{{"Example.COM.:443", "a.test:80"}, {"b.test"}, {"pypi"}, {}};
  NetworkFile flags{{"example.com:443", "c.test:8*"}, {"B.TEST."}, {"pypi"}, {}};
  auto m = merge_rules({{"network.yaml", file}, {"flags", flags}});
  EXPECT_EQ(m.allow_http, (std::vector<std::string>{"pypi.org:443", "files.pythonhosted.org:443",
                                                    "example.com:443", "a.test:80", "c.test:8*"}));
  EXPECT_EQ(m.allow_dns,
            (std::vector<std::string>{"pypi.org", "files.pythonhosted.org", "b.test"}));
  EXPECT_EQ(m.presets, (std::vector<std::string>{"pypi"}));
  try {
    merge_rules(
        {{"network.yaml", {{"*:443"}, {}, {}, {}}}, {"flags", {{}, {"a..b"}, {"nope"}, {}}}});
    FAIL();
  } catch (const RulesError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("network.yaml: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("flags: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown preset"), std::string::npos) << msg;
    EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 2) << msg;  // three errors, one a line
  }
}

TEST(ApprovalsTest, OnlyApprovedEntriesApplyAndApprovalPersists) {
  const fs::path state = fs::temp_directory_path() / ("vp-approvals-" + std::to_string(::getpid()));
  fs::remove_all(state);
  Project project{"/work/example", "0123456789abcdef"};
  NetworkFile file{{"a.test:443", "Planted.test:443"}, {"a.test"}, {"npm"}, {}};
  {
    Approvals a(state, project);
    EXPECT_TRUE(empty(a.approved_part(file)));  // nothing approved yet
    auto fresh = a.unapproved(file);
    EXPECT_EQ(fresh.allow_http, (std::vector<std::string>{"a.test:443", "planted.test:443"}));
    EXPECT_EQ(fresh.presets, (std::vector<std::string>{"npm"}));
    a.approve({{"A.TEST:443"}, {"a.test"}, {}, {}});
  }
  Approvals again(state, project);  // read back from disk
  auto part = again.approved_part(file);
  EXPECT_EQ(part.allow_http, (std::vector<std::string>{"a.test:443"}));
  EXPECT_EQ(part.allow_dns, (std::vector<std::string>{"a.test"}));
  EXPECT_TRUE(part.presets.empty());
  auto fresh = again.unapproved(file);
  EXPECT_EQ(fresh.allow_http, (std::vector<std::string>{"planted.test:443"}));
  EXPECT_EQ(fresh.presets, (std::vector<std::string>{"npm"}));
  struct stat st {};
  ASSERT_EQ(::stat(again.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(again.path().parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Another project shares nothing.
  EXPECT_TRUE(empty(Approvals(state, {"/work/other", "fedcba9876543210"}).approved_part(file)));
  fs::remove_all(state);
}

namespace vibepit::launcher {
namespace {

TEST(NetworkFileCredentials, ReferencesOnlyCanonicalAndApproved) {
  const auto f = parse_network_yaml(
      "credentials:\n  - GH_TOKEN=API.GitHub.com:443\n  - "
      "\"NPM=registry.npmjs.org:443,format=Bearer {}\"\n",
      "network.yaml");
  ASSERT_EQ(f.credentials.size(), 2u);
  auto m = merge_rules({{"network.yaml", f}});
  EXPECT_EQ(m.credentials,
            (std::vector<std::string>{
                "GH_TOKEN=api.github.com:443,header=Authorization,format=Bearer {}",
                "NPM=registry.npmjs.org:443,header=Authorization,format=Bearer {}"}));
  // A file may not name where a value comes from: file= would read a host file for the agent.
  NetworkFile planted;
  planted.credentials = {"GH=evil.test:443,file=/home/user/.ssh/id_ed25519"};
  try {
    merge_rules({{".vibepit/network.yaml", planted}});
    FAIL() << "a source in network.yaml was accepted";
  } catch (const RulesError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option \"file\""), std::string::npos) << e.what();
  }

  const fs::path state =
      fs::temp_directory_path() / ("vp-cred-approvals-" + std::to_string(::getpid()));
  fs::remove_all(state);
  Project project{"/work/example", "0123456789abcdef"};
  {
    Approvals a(state, project);
    EXPECT_EQ(a.unapproved(f).credentials.size(), 2u);
    NetworkFile one;
    one.credentials = {"GH_TOKEN=api.github.com:443"};
    a.approve(one);
  }
  Approvals again(state, project);
  EXPECT_EQ(again.approved_part(f).credentials,
            (std::vector<std::string>{
                "GH_TOKEN=api.github.com:443,header=Authorization,format=Bearer {}"}));
  EXPECT_EQ(again.unapproved(f).credentials.size(), 1u);
  fs::remove_all(state);
}

TEST(NetworkFileCredentials, EditsKeepThem) {
  const std::string text = "credentials:\n  - GH=a.test:443  # mine\nallow-http:\n  - a.test:443\n";
  std::vector<std::string> appended;
  const auto out = add_to_network_yaml(text, "allow-http", {"b.test:443"}, appended);
  EXPECT_NE(out.find("GH=a.test:443  # mine"), std::string::npos) << out;
  EXPECT_EQ(parse_network_yaml(out, "x").credentials, (std::vector<std::string>{"GH=a.test:443"}));
}

}  // namespace
}  // namespace vibepit::launcher
