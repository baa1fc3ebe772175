// Where vibepit ci writes its report and learned rules: inside the project (which the sandbox
// writes), no symlink is followed, before or after the directory was opened.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "vibepit/launcher/host/untrusted_file.hpp"

namespace vibepit::launcher {
namespace {
namespace fs = std::filesystem;

class OutputDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("vp-outdir-" + std::to_string(::getpid()));
    project_ = base_ / "project";
    outside_ = base_ / "outside";
    fs::remove_all(base_);
    fs::create_directories(project_);
    fs::create_directories(outside_);
  }
  void TearDown() override { fs::remove_all(base_); }

  static std::string read(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path base_, project_, outside_;
};

TEST_F(OutputDirTest, MakesMissingDirectoriesInsideTheProject) {
  OutputDir d(project_ / "out/deep", project_);
  d.write("report.json", "{}");
  EXPECT_EQ(read(project_ / "out/deep/report.json"), "{}");
  EXPECT_EQ(d.path(), project_ / "out/deep");
}

TEST_F(OutputDirTest, ASymlinkAnywhereBelowTheProjectIsRefused) {
  fs::create_directory_symlink(outside_, project_ / "out");
  EXPECT_THROW(OutputDir(project_ / "out/deep", project_), UntrustedFileError);
  EXPECT_THROW(OutputDir(project_ / "out", project_), UntrustedFileError);
  // A path with ".." is taken lexically: it never walks through the link.
  EXPECT_THROW(OutputDir(project_ / "x/../out/deep", project_), UntrustedFileError);
  EXPECT_TRUE(fs::is_empty(outside_));  // nothing made or written through the link
}

TEST_F(OutputDirTest, ADirectorySwappedForASymlinkAfterItWasOpenedIsNotFollowed) {
  OutputDir d(project_ / "out/deep", project_);
  // What a job does while it runs: move the directory away and plant a link in its place.
  fs::rename(project_ / "out", project_ / "moved");
  fs::create_directory_symlink(outside_, project_ / "out");
  fs::create_directories(outside_ / "deep");
  d.write("report.json", "mine");
  EXPECT_EQ(read(project_ / "moved/deep/report.json"), "mine");  // the directory it opened
  EXPECT_TRUE(fs::is_empty(outside_ / "deep"));
}

TEST_F(OutputDirTest, APlantedSymlinkAtTheFileIsReplacedNotFollowed) {
  OutputDir d(project_, project_);
  std::ofstream(outside_ / "victim") << "keep me";
  fs::create_symlink(outside_ / "victim", project_ / "report.json");
  fs::create_symlink(outside_ / "victim", project_ / "report.json.tmp");
  d.write("report.json", "new");
  EXPECT_EQ(read(outside_ / "victim"), "keep me");
  EXPECT_FALSE(fs::is_symlink(project_ / "report.json"));
  EXPECT_EQ(read(project_ / "report.json"), "new");
}

TEST_F(OutputDirTest, OutsideTheProjectThePathIsTheUsersOwn) {
  fs::create_directory_symlink(outside_, base_ / "link");
  OutputDir d(base_ / "link/sub", project_);  // the user's link, outside the sandbox's reach
  d.write("r.json", "x");
  EXPECT_EQ(read(outside_ / "sub/r.json"), "x");
}

TEST_F(OutputDirTest, RootWritingInAUsersProjectLeavesEverythingTheirs) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files away";
  ASSERT_EQ(::chown(project_.c_str(), 4321, 4322), 0);
  const fs::path kept = project_ / "network.yaml";
  std::ofstream(kept) << "# mine\n";
  ASSERT_EQ(::chown(kept.c_str(), 4321, 4321), 0);
  ASSERT_EQ(::chmod(kept.c_str(), 0640), 0);
  write_untrusted_file(kept, "# mine\nallow-http: [a.test:443]\n");  // replaced, atomically
  struct stat st {};
  ASSERT_EQ(::stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4321u);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // A new file, in a directory made for it: both the project owner's.
  const fs::path fresh = project_ / ".vibepit" / "network.yaml";
  write_untrusted_file(fresh, "allow-http: []\n");
  for (const auto& p : {fresh.parent_path(), fresh}) {
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u) << p;
    EXPECT_EQ(st.st_gid, 4322u) << p;
  }
  OutputDir d(project_ / "out" / "deep", project_);  // vibepit ci's report, as root
  d.write("report.json", "{}");
  for (const auto& p : {project_ / "out", project_ / "out" / "deep" / "report.json"}) {
    ASSERT_EQ(::stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u) << p;
  }
}

}  // namespace
// Root reads a project's files for its owner, whom the agent runs as, and nobody else's.
TEST_F(OutputDirTest, RootReadsTheProjectOwnersFilesAndNoOneElses) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give files away";
  const fs::path f = project_ / "network.yaml";
  std::ofstream(f) << "allow-http: []\n";
  ASSERT_EQ(::chown(f.c_str(), 4321, 4321), 0);
  ASSERT_EQ(::chown(project_.c_str(), 4321, 4321), 0);
  EXPECT_THROW(read_untrusted_file(f), UntrustedFileError);  // not root's own
  EXPECT_EQ(owner_trusted_by_root(project_), std::optional<uid_t>(4321));
  EXPECT_EQ(read_untrusted_file(f, 1 << 20, owner_trusted_by_root(project_)),
            std::optional<std::string>("allow-http: []\n"));
  ASSERT_EQ(::chown(f.c_str(), 4322, 4322), 0);  // another user's file in the owner's project
  EXPECT_THROW(read_untrusted_file(f, 1 << 20, owner_trusted_by_root(project_)),
               UntrustedFileError);
}

}  // namespace vibepit::launcher
