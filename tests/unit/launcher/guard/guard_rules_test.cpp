// project_guard.hpp's rules, on a real directory tree.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "vibepit/launcher/guard/project_guard.hpp"

namespace vibepit::launcher {
namespace {
namespace fs = std::filesystem;

class GuardRules : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("guard-rules-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
    // A project with a clone below it, a bare repository, a worktree-style git directory,
    // a directory that is one name short of a git directory, and a symlink to a git dir.
    for (const char* d : {"src", "vendor/lib/.git/hooks", "fixtures/bare.git/objects",
                          "fixtures/bare.git/refs/heads", "fixtures/bare.git/hooks", "wt/gitdir",
                          "almost/objects", "almost/refs"})
      fs::create_directories(dir_ / d);
    for (const char* f : {"src/a.c", "vendor/lib/.git/config", "fixtures/bare.git/HEAD",
                          "fixtures/bare.git/config", "wt/gitdir/HEAD", "wt/gitdir/commondir"})
      std::ofstream(dir_ / f) << "x\n";
    fs::create_directory_symlink(dir_ / "fixtures/bare.git", dir_ / "link-to-bare");
    root_ = ::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_, 0);
  }
  void TearDown() override {
    ::close(root_);
    fs::remove_all(dir_);
  }
  fs::path dir_;
  int root_ = -1;
};

TEST_F(GuardRules, GitNamesInAnyCase) {
  EXPECT_TRUE(is_git_name(".git"));
  EXPECT_TRUE(is_git_name(".GIT"));
  EXPECT_TRUE(is_git_name(".Git"));
  EXPECT_FALSE(is_git_name("git"));
  EXPECT_FALSE(is_git_name(".gitignore"));
  EXPECT_FALSE(is_git_name(".git "));
  EXPECT_FALSE(is_git_name(""));
}

TEST_F(GuardRules, WhatMakesAGitDirectory) {
  auto at = [&](const char* d) { return ::open((dir_ / d).c_str(), O_PATH | O_DIRECTORY); };
  const int bare = at("fixtures/bare.git"), wt = at("wt/gitdir"), almost = at("almost"),
            src = at("src");
  EXPECT_TRUE(is_git_dir(bare));
  EXPECT_TRUE(is_git_dir(wt));  // HEAD and commondir
  EXPECT_FALSE(is_git_dir(almost));
  EXPECT_TRUE(is_git_dir(almost, "HEAD"));
  EXPECT_FALSE(is_git_dir(src, "HEAD"));
  for (int fd : {bare, wt, almost, src}) ::close(fd);
}

TEST_F(GuardRules, Creating) {
  struct Case {
    const char* path;
    GuardRefusal want;
  } cases[] = {
      {"src/b.c", GuardRefusal::none},
      {"new-dir", GuardRefusal::none},
      {".git", GuardRefusal::git_name},  // the project's own is not seen through the filter
      {"src/.git", GuardRefusal::git_name},
      {"src/.GiT", GuardRefusal::git_name},
      {"nowhere/.git", GuardRefusal::git_name},  // whether or not the parent exists
      {"vendor/lib/.git/hooks/post-checkout", GuardRefusal::inside_git},
      {"vendor/lib/.git/config.worktree", GuardRefusal::inside_git},
      {"fixtures/bare.git/config.worktree", GuardRefusal::inside_git},
      {"fixtures/bare.git/hooks/pre-commit", GuardRefusal::inside_git},
      {"wt/gitdir/config", GuardRefusal::inside_git},
      {"almost/HEAD", GuardRefusal::makes_git_dir},
      {"almost/commondir", GuardRefusal::none},  // no HEAD: not yet
      {"almost/other", GuardRefusal::none},
      {"src/HEAD", GuardRefusal::none},  // a file called HEAD alone is nothing
      // A symlink is never followed: through it, the bare repository is not a parent.
      {"link-to-bare/hooks/x", GuardRefusal::none},
  };
  for (const auto& c : cases)
    EXPECT_EQ(check_create(root_, c.path), c.want) << c.path << ": " << describe(c.want);
}

TEST_F(GuardRules, Changing) {
  struct Case {
    const char* path;
    GuardRefusal want;
  } cases[] = {
      {"src/a.c", GuardRefusal::none},
      {"src", GuardRefusal::none},
      {"", GuardRefusal::none},
      {"vendor/lib/.git", GuardRefusal::inside_git},  // renaming it away, or removing it
      {"vendor/lib/.git/config", GuardRefusal::inside_git},
      {"fixtures/bare.git/config", GuardRefusal::inside_git},
      {"fixtures/bare.git/HEAD", GuardRefusal::inside_git},
      {"fixtures/bare.git/hooks/x", GuardRefusal::inside_git},
      {"fixtures/bare.git/refs/heads/main", GuardRefusal::none},  // refs run nothing
      {"fixtures/bare.git", GuardRefusal::none},  // moving it whole changes nothing in it
      {"almost/objects", GuardRefusal::none},
  };
  for (const auto& c : cases)
    EXPECT_EQ(check_change(root_, c.path), c.want) << c.path << ": " << describe(c.want);
}

TEST_F(GuardRules, OpenBeneathNeverFollowsASymlinkNorLeaves) {
  fs::create_symlink("/etc/passwd", dir_ / "src/passwd");
  fs::create_directory_symlink("/etc", dir_ / "etc");
  EXPECT_LT(open_beneath(root_, "src/passwd", O_RDONLY), 0);
  EXPECT_EQ(errno, ELOOP);
  EXPECT_LT(open_beneath(root_, "etc/passwd", O_RDONLY), 0);
  EXPECT_LT(open_beneath(root_, "../x", O_RDONLY), 0);
  const int fd = open_beneath(root_, "src/a.c", O_RDONLY);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace vibepit::launcher
