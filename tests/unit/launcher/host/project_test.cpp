// Session set-up decisions made before Docker is asked anything: which directory is the
// project, and which subnet a session network gets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "vibepit/launcher/host/project.hpp"

using namespace vibepit::launcher;
namespace fs = std::filesystem;

TEST(ProjectTest, GitRootAndRefusals) {
  const fs::path base = fs::temp_directory_path() / ("vp-project-" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base / "repo/.git");
  fs::create_directories(base / "repo/src/deep");
  fs::create_directories(base / "plain");
  auto p = resolve_project(base / "repo/src/deep", "/nonexistent-home");
  EXPECT_EQ(p.root, fs::canonical(base / "repo"));  // resolved to the git root
  EXPECT_EQ(p.hash.size(), 16u);
  EXPECT_EQ(resolve_project(base / "repo", "").hash, p.hash);  // same project, same hash
  EXPECT_EQ(resolve_project(base / "plain", "").root, fs::canonical(base / "plain"));
  EXPECT_NE(resolve_project(base / "plain", "").hash, p.hash);
  for (const char* bad : {"/", "/etc", "/usr/lib", "/proc/self", "/tmp", "/home", "/var/lib"}) {
    EXPECT_THROW(resolve_project(bad, ""), std::runtime_error) << bad;
  }
  // The user's home is refused, its subdirectories are not.
  EXPECT_THROW(resolve_project(base / "plain", (base / "plain").string()), std::runtime_error);
  EXPECT_NO_THROW(resolve_project(base / "plain", base.string()));
  EXPECT_THROW(resolve_project(base / "missing", ""), std::runtime_error);
  // A project that holds the home, or vibepit's state directory, or lies in that: refused.
  fs::create_directories(base / "plain/user/.local/state/vibepit/sessions");
  EXPECT_THROW(resolve_project(base / "plain", (base / "plain/user").string()), std::runtime_error);
  EXPECT_NO_THROW(resolve_project(base / "plain", (base / "plainer").string()));  // not a prefix
  const fs::path state = base / "plain/user/.local/state/vibepit";
  EXPECT_THROW(resolve_project(base / "plain", "", state), std::runtime_error);
  EXPECT_THROW(resolve_project(state / "sessions", "", state), std::runtime_error);
  EXPECT_NO_THROW(resolve_project(base / "repo", "", state));
  EXPECT_NO_THROW(resolve_project(base / "plain", "", base / "plainer/state"));  // not a prefix
  fs::remove_all(base);
}

TEST(SubnetTest, ParseOverlapAndChoose) {
  auto pool = parse_subnet4("10.219.0.0/16");
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->cidr(), "10.219.0.0/16");
  EXPECT_EQ(parse_subnet4("10.219.7.9/28")->cidr(), "10.219.7.0/28");  // host bits dropped
  EXPECT_FALSE(parse_subnet4("10.219.0.0"));
  EXPECT_FALSE(parse_subnet4("10.219.0.0/33"));
  EXPECT_FALSE(parse_subnet4("10.219.0.0/2x"));
  EXPECT_FALSE(parse_subnet4("fd00::/64"));
  auto a = *parse_subnet4("10.219.0.0/28");
  EXPECT_TRUE(a.overlaps(*pool));
  EXPECT_TRUE(pool->overlaps(a));
  EXPECT_FALSE(a.overlaps(*parse_subnet4("10.219.0.16/28")));
  EXPECT_EQ(a.host(2), "10.219.0.2");

  // Seed 0 starts at the pool's first /28; taken ones are skipped.
  std::vector<Subnet4> taken = {a, *parse_subnet4("10.219.0.16/28")};
  EXPECT_EQ(choose_subnet(*pool, 28, taken, 0)->cidr(), "10.219.0.32/28");
  // A host route over the whole pool leaves nothing.
  EXPECT_FALSE(choose_subnet(*pool, 28, {*parse_subnet4("10.0.0.0/8")}, 5));
  // A small pool fills up.
  auto small = *parse_subnet4("192.0.2.0/27");
  EXPECT_TRUE(choose_subnet(small, 28, {*parse_subnet4("192.0.2.0/28")}, 0));
  EXPECT_FALSE(choose_subnet(small, 28, {small}, 0));
}

// The engine host's own addresses, as /proc/PID/net of the engine lists them: every
// "/32 host LOCAL" entry of fib_trie (each address is in its Main and Local tables) and
// every IPv6 address of if_inet6, loopback and link-local left out.
TEST(LocalAddressRanges, FromProcNet) {
  const char* fib_trie =
      "Main:\n"
      "  +-- 0.0.0.0/0 3 0 4\n"
      "     +-- 127.0.0.0/8 2 0 2\n"
      "           |-- 127.0.0.1\n"
      "              /32 host LOCAL\n"
      "     +-- 172.17.0.0/16 2 0 2\n"
      "           |-- 172.17.0.0\n"
      "              /16 link UNICAST\n"
      "           |-- 172.17.0.1\n"
      "              /32 host LOCAL\n"
      "        |-- 172.17.255.255\n"
      "           /32 link BROADCAST\n"
      "        |-- 198.51.100.1\n"
      "           /32 host LOCAL\n"
      "Local:\n"
      "           |-- 172.17.0.1\n"
      "              /32 host LOCAL\n";
  const char* if_inet6 =
      "00000000000000000000000000000001 01 80 10 80       lo\n"
      "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
      "20010db8000000000000000000000042 04 40 00 80     eth0\n"
      "short\n";
  EXPECT_EQ(local_address_ranges(fib_trie, if_inet6),
            (std::vector<std::string>{"172.17.0.1/32", "198.51.100.1/32", "2001:db8::42/128"}));
  EXPECT_TRUE(local_address_ranges("", "").empty());
  EXPECT_TRUE(local_address_ranges("|-- not-an-address\n/32 host LOCAL\n", "zz\n").empty());
  EXPECT_TRUE(address_ranges_of(0).empty());
}

// This process's own namespace read from /proc: addresses getifaddrs has too (it also has
// those of interfaces that are down, which have no local route).
TEST(LocalAddressRanges, OwnNamespaceHoldsOnlyItsInterfacesAddresses) {
  const auto interfaces = host_address_ranges();
  for (const auto& r : address_ranges_of(::getpid()))
    EXPECT_TRUE(std::binary_search(interfaces.begin(), interfaces.end(), r)) << r;
}
