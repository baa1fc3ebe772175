// The in-memory build context: a ustar archive that tar itself reads back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "vibepit/docker/tar.hpp"

using vibepit::docker::TarWriter;

namespace {
std::uint64_t field(const std::string& block, std::size_t at, std::size_t len) {
  return std::strtoull(block.substr(at, len).c_str(), nullptr, 8);
}
unsigned checksum(std::string block) {
  std::memset(block.data() + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : block) sum += c;
  return sum;
}
}  // namespace

TEST(Tar, HeadersSizesAndPadding) {
  TarWriter w;
  w.add_directory("etc");
  w.add_file("etc/passwd", "code:x:1000:1000::/home/code:/bin/bash\n", 0644);
  w.add_file("vibepit-proxy", std::string(513, 'b'), 0755);
  w.add_symlink("lib64", "usr/lib64");
  const std::string tar = w.finish();
  ASSERT_EQ(tar.size() % 512, 0u);
  // dir header, file header + 1 block, file header + 2 blocks, symlink header, 2 zero blocks
  ASSERT_EQ(tar.size(), 512u * (1 + 2 + 3 + 1 + 2));
  const std::string dir = tar.substr(0, 512);
  EXPECT_EQ(std::string(dir.c_str()), "etc/");
  EXPECT_EQ(dir[156], '5');
  EXPECT_EQ(field(dir, 100, 8), 0755u);
  EXPECT_EQ(field(dir, 148, 8), checksum(dir));
  EXPECT_EQ(dir.substr(257, 6), std::string("ustar\0", 6));
  const std::string file = tar.substr(512, 512);
  EXPECT_EQ(std::string(file.c_str()), "etc/passwd");
  EXPECT_EQ(field(file, 124, 12), 39u);
  EXPECT_EQ(field(file, 148, 8), checksum(file));
  EXPECT_EQ(tar.substr(1024, 39), "code:x:1000:1000::/home/code:/bin/bash\n");
  EXPECT_EQ(tar[1024 + 39], '\0');
  const std::string bin = tar.substr(1536, 512);
  EXPECT_EQ(field(bin, 100, 8), 0755u);
  EXPECT_EQ(field(bin, 124, 12), 513u);
  const std::string link = tar.substr(512 * 6, 512);
  EXPECT_EQ(link[156], '2');
  EXPECT_EQ(std::string(link.c_str() + 157), "usr/lib64");
  EXPECT_EQ(tar.substr(tar.size() - 1024), std::string(1024, '\0'));
  EXPECT_EQ(w.size(), 0u);
}

TEST(Tar, LongPathsUsePrefixAndBadPathsThrow) {
  TarWriter w;
  const std::string dir(120, 'd');
  const std::string path = dir + "/libsomething.so.1";
  w.add_file(path, "x");
  const std::string tar = w.finish();
  EXPECT_EQ(std::string(tar.c_str()), "libsomething.so.1");
  EXPECT_EQ(std::string(tar.c_str() + 345), dir);
  TarWriter bad;
  EXPECT_THROW(bad.add_file("/etc/passwd", "x"), std::invalid_argument);
  EXPECT_THROW(bad.add_file("a/../../x", "x"), std::invalid_argument);
  EXPECT_THROW(bad.add_file("..", "x"), std::invalid_argument);
  EXPECT_THROW(bad.add_file(std::string(101, 'n'), "x"), std::invalid_argument);
  EXPECT_NO_THROW(bad.add_file("a/..b/c", "x"));  // ".." only as a whole component
}
