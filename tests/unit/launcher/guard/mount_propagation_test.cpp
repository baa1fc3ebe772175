// Which mount holds a path, and whether a mount made there reaches a rootless engine's mount
// namespace (it does only under a shared mount).
#include <gtest/gtest.h>

#include <string>

#include "vibepit/launcher/guard/project_guard.hpp"

namespace vibepit::launcher {
namespace {

// As /proc/self/mountinfo says it: a private /, a shared /home, and on it a private
// /home/ann/st ate (a space, escaped), and /homework (a prefix by bytes, not by components).
constexpr const char* kMountinfo =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "30 22 8:2 / /home rw,relatime shared:7 - ext4 /dev/sda2 rw\n"
    "31 30 0:40 / /home/ann/st\\040ate rw master:3 - tmpfs tmpfs rw\n"
    "32 22 8:3 / /homework rw shared:9 - ext4 /dev/sda3 rw\n"
    "33 22 0:41 / /run/user/1000 rw,nosuid shared:12 master:4 - tmpfs tmpfs rw\n";

TEST(MountPropagation, TheDeepestMountHoldingThePathDecides) {
  EXPECT_EQ(private_mount_holding(kMountinfo, "/home/ann/.local/state/vibepit/sessions"), "");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/home"), "");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/home/ann/st ate/vibepit"), "/home/ann/st ate");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/var/lib/vibepit"), "/");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/homeless/x"), "/");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/homework/x"), "");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/run/user/1000/../../../tmp"), "/");
  EXPECT_EQ(private_mount_holding(kMountinfo, "/run/user/1000/x"), "");  // shared and slave
}

TEST(MountPropagation, AMountOverAnotherAtTheSamePointDecides) {
  const std::string text = std::string(kMountinfo) + "40 30 0:50 / /home rw - tmpfs tmpfs rw\n";
  EXPECT_EQ(private_mount_holding(text, "/home/ann/x"), "/home");
}

TEST(MountPropagation, WithoutAMountHoldingThePathThereIsNothingToSay) {
  EXPECT_EQ(private_mount_holding("garbage\n\n - \n", "/x"), "");
  EXPECT_EQ(private_mount_holding("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n", "/x"), "/");
}

}  // namespace
}  // namespace vibepit::launcher
