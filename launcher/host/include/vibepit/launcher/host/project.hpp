#pragma once
// The project a session serves, and the host facts a session is set up from.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace vibepit::launcher {

struct Project {
  std::filesystem::path root;  // absolute, symlinks resolved; the git root when there is one
  std::string hash;            // 16 hex digits of SHA-256(root): dev.vibepit.project
};

// PATH (or the current directory), resolved to its git work tree's root. Refuses "/", the
// user's home or a directory that holds it, vibepit's state directory (session credentials,
// approvals) or a directory that holds it or lies in it, and system directories, with a
// message saying why: the sandbox may write the project. `home` is $HOME; `state_dir` is
// vibepit's ($XDG_STATE_HOME/vibepit), empty when not known.
Project resolve_project(const std::filesystem::path& given, const std::string& home,
                        const std::filesystem::path& state_dir = {});

// The host's own interface addresses as /32 and /128 ranges (loopback and IPv6 link-local
// left out: always blocked anyway). They go into the session proxy's block-cidr.
std::vector<std::string> host_address_ranges();
// The same for the network namespace process `pid` is in, from /proc/PID/net: the host's
// when that is the engine's and vibepit itself is in another (a container, `unshare -n`).
// Empty when it cannot be read.
std::vector<std::string> address_ranges_of(pid_t pid);
// What address_ranges_of reads: the local IPv4 addresses in `fib_trie` and the IPv6 ones in
// `if_inet6` (both as /proc/net has them), as /32 and /128 ranges, sorted, loopback and
// IPv6 link-local left out.
std::vector<std::string> local_address_ranges(std::string_view fib_trie, std::string_view if_inet6);

// An IPv4 subnet for a session network.
struct Subnet4 {
  std::uint32_t base = 0;  // host order, host bits zero
  int prefix = 28;
  std::string cidr() const;                     // "10.219.3.16/28"
  std::string host(std::uint32_t index) const;  // base + index, as text
  bool overlaps(const Subnet4& other) const;
};
std::optional<Subnet4> parse_subnet4(const std::string& cidr);

// Subnets the host already routes (/proc/net/route), to stay clear of.
std::vector<Subnet4> host_routes();

// The first /prefix in `pool`, starting at a place derived from `seed`, that overlaps
// nothing in `taken`. nullopt when the pool is full.
std::optional<Subnet4> choose_subnet(const Subnet4& pool, int prefix,
                                     const std::vector<Subnet4>& taken, std::uint64_t seed);

}  // namespace vibepit::launcher
