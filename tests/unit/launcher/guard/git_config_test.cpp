// The config a session's copy of the project's .git gets: where things are, never a program
// or a credential.
#include <gtest/gtest.h>

#include <string>

#include "vibepit/launcher/guard/git_shield.hpp"

namespace vibepit::launcher {
namespace {

// `git config --null --list` output from entries.
std::string list(std::initializer_list<std::pair<const char*, const char*>> entries) {
  std::string out;
  for (const auto& [k, v] : entries) out += std::string(k) + "\n" + v + '\0';
  return out;
}

TEST(GitConfig, OnlyWhereThingsAreNoProgramsNoCredentials) {
  const std::string got = sandbox_git_config(list({
      {"core.repositoryformatversion", "0"},
      {"core.fsmonitor", "touch /tmp/pwned"},            // a program: dropped
      {"core.hookspath", "/home/u/hooks"},               // where hooks run from: dropped
      {"core.sshcommand", "ssh -i key"},                 // a program: dropped
      {"core.bare", "true"},                             // the copy is never bare
      {"filter.lfs.process", "git-lfs filter-process"},  // a program: dropped
      {"include.path", "/home/u/.gitconfig-work"},       // elsewhere: dropped
      {"http.https://github.com/.extraheader", "AUTHORIZATION: basic c2VjcmV0"},  // a secret
      {"remote.origin.url", "https://x-access-token:SECRET@github.com/acme/app"},
      {"remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"},
      {"remote.origin.uploadpack", "evil"},  // a program on the remote side
      {"branch.main.remote", "origin"},
      {"branch.feature.x.merge", "refs/heads/feature.x"},  // a subsection with a dot
      {"user.name", "A \"quoted\" name"},
      {"alias.st", "!rm -rf ~"},  // a shell alias: dropped
  }));
  EXPECT_EQ(got,
            "[core]\n"
            "\tbare = false\n"
            "\trepositoryformatversion = \"0\"\n"
            "[remote \"origin\"]\n"
            "\turl = \"https://github.com/acme/app\"\n"
            "\tfetch = \"+refs/heads/*:refs/remotes/origin/*\"\n"
            "[branch \"main\"]\n"
            "\tremote = \"origin\"\n"
            "[branch \"feature.x\"]\n"
            "\tmerge = \"refs/heads/feature.x\"\n"
            "[user]\n"
            "\tname = \"A \\\"quoted\\\" name\"\n");
  for (const char* secret : {"SECRET", "c2VjcmV0", "touch", "hooks", "ssh", "rm -rf"})
    EXPECT_EQ(got.find(secret), std::string::npos) << secret;
}

TEST(GitConfig, UserinfoLeavesUrls) {
  const struct {
    const char* in;
    const char* want;
  } cases[] = {
      {"https://user:token@github.com/a/b", "https://github.com/a/b"},
      {"https://token@github.com/a/b", "https://github.com/a/b"},
      {"https://github.com/a/b@c", "https://github.com/a/b@c"},  // an '@' in the path stays
      {"git@github.com:a/b.git", "git@github.com:a/b.git"},      // scp-like: a user, no secret
      {"ssh://git@host/x", "ssh://host/x"},
      {"/srv/repo.git", "/srv/repo.git"},
  };
  for (const auto& c : cases) EXPECT_EQ(without_userinfo(c.in), c.want) << c.in;
}

}  // namespace
}  // namespace vibepit::launcher
