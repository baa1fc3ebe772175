// What the image builders decide without a Docker daemon: the proxy's shared objects, the
// embedded definitions, and the sandbox tag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "vibepit/launcher/host/embedded_files.hpp"
#include "vibepit/launcher/host/sha256.hpp"
#include "vibepit/launcher/images/images.hpp"

using namespace vibepit::launcher;
namespace fs = std::filesystem;

TEST(Images, SharedObjectsOfARealBinary) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  auto libs = shared_objects(self);
  auto has = [&](const std::string& part) {
    return std::any_of(libs.begin(), libs.end(), [&](const fs::path& p) {
      return p.filename().string().find(part) != std::string::npos;
    });
  };
  EXPECT_TRUE(has("libc.so.6"));
  EXPECT_TRUE(has("ld-linux"));     // the loader itself goes into the image
  EXPECT_FALSE(has("linux-vdso"));  // no file behind the vDSO
  for (const auto& p : libs) {
    EXPECT_TRUE(p.is_absolute()) << p;
    EXPECT_TRUE(fs::exists(p)) << p;
  }
  EXPECT_THROW(shared_objects("/nonexistent/binary"), std::runtime_error);
}

TEST(Images, EmbeddedDefinitionsAndTags) {
  const auto& files = embedded_files();
  ASSERT_TRUE(files.count("sandbox/Dockerfile"));
  ASSERT_TRUE(files.count("sandbox/packages"));
  for (const char* pkg : {"bash", "coreutils", "curl", "git", "ca-certificates", "less", "procps"})
    EXPECT_NE(files.at("sandbox/packages").find(pkg), std::string::npos) << pkg;
  EXPECT_NE(files.at("sandbox/Dockerfile").find("useradd"), std::string::npos);
  const auto a = sandbox_image_tag(1000, 1000);
  EXPECT_EQ(a, sandbox_image_tag(1000, 1000));  // stable
  EXPECT_NE(a, sandbox_image_tag(1001, 1000));  // per user
  EXPECT_NE(a, sandbox_image_tag(1000, 1001));
  EXPECT_EQ(a.rfind("vibepit-sandbox:", 0), 0u);
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
