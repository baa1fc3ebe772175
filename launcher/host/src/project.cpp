#include "vibepit/launcher/host/project.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "vibepit/launcher/host/sha256.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;

namespace {

// `inner` is `outer` or lies beneath it (both absolute and without symlinks).
bool within(const fs::path& inner, const fs::path& outer) {
  auto [o, i] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
  return o == outer.end() || (std::next(o) == outer.end() && o->empty());
}

}  // namespace

Project resolve_project(const fs::path& given, const std::string& home, const fs::path& state_dir) {
  std::error_code ec;
  fs::path dir = fs::canonical(given.empty() ? fs::current_path() : given, ec);
  if (ec) throw std::runtime_error("project " + given.string() + ": " + ec.message());
  if (!fs::is_directory(dir))
    throw std::runtime_error("project " + dir.string() + ": not a directory");
  for (fs::path p = dir;; p = p.parent_path()) {
    if (fs::exists(p / ".git", ec)) {
      dir = p;
      break;
    }
    if (p == p.root_path()) break;
  }
  const std::string s = dir.string();
  auto refuse = [&](const std::string& why) {
    throw std::runtime_error("refusing " + s + " as the project: " + why +
                             "; run vibepit in (or pass) the project's own directory");
  };
  if (s == "/") refuse("it is the root directory, and the sandbox would get all of it");
  if (!home.empty()) {
    std::error_code hec;
    auto h = fs::canonical(home, hec);
    if (!hec && dir == h) refuse("it is your home directory (dotfiles, keys, credentials)");
    if (!hec && within(h, dir))
      refuse("it holds your home directory " + h.string() + " (dotfiles, keys, credentials)");
  }
  if (!state_dir.empty()) {
    std::error_code sec;
    const auto st = fs::weakly_canonical(fs::absolute(state_dir), sec);
    if (!sec && (within(st, dir) || within(dir, st)))
      refuse("it " + std::string(within(st, dir) ? "holds" : "lies in") +
             " vibepit's state directory " + st.string() +
             " (session credentials, approved rules), which the sandbox must not reach");
  }
  static const std::array<const char*, 6> exact = {"/home", "/tmp", "/var",
                                                   "/root", "/srv", "/opt"};
  for (const char* e : exact)
    if (s == e) refuse("it is a system directory");
  static const std::array<const char*, 17> trees = {
      "/bin", "/boot", "/dev", "/etc", "/lib",     "/lib32",   "/lib64",   "/libx32",   "/proc",
      "/run", "/sbin", "/sys", "/usr", "/var/lib", "/var/run", "/var/log", "/var/cache"};
  for (const char* t : trees) {
    const std::string tree(t);
    if (s == tree || s.rfind(tree + "/", 0) == 0) refuse("it is inside " + tree);
  }
  return {dir, sha256_hex(s).substr(0, 16)};
}

std::vector<std::string> host_address_ranges() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
      ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
      out.push_back(std::string(text) + "/32");
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr)) continue;
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
      out.push_back(std::string(text) + "/128");
    }
  }
  ::freeifaddrs(list);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> local_address_ranges(std::string_view fib_trie,
                                              std::string_view if_inet6) {
  std::vector<std::string> out;
  auto lines = [](std::string_view text, auto&& fn) {
    while (!text.empty()) {
      const auto nl = text.find('\n');
      fn(text.substr(0, nl));
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    }
  };
  // "|-- 192.0.2.2" and under it "/32 host LOCAL": an address of this namespace's own.
  std::string last;
  lines(fib_trie, [&](std::string_view line) {
    const auto start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) return;
    line.remove_prefix(start);
    if (line.rfind("|-- ", 0) == 0) {
      last = std::string(line.substr(4));
    } else if (line.rfind("/32 host LOCAL", 0) == 0 && !last.empty()) {
      in_addr a{};
      if (::inet_pton(AF_INET, last.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) != 127)
        out.push_back(last + "/32");
    }
  });
  // "fe800000000000000000000000000001 04 40 20 80 eth0": the address in 32 hex digits.
  lines(if_inet6, [&](std::string_view line) {
    if (line.size() < 32) return;
    in6_addr a{};
    for (int i = 0; i < 16; ++i) {
      unsigned v = 0;
      const auto [p, ec] = std::from_chars(line.data() + 2 * i, line.data() + 2 * i + 2, v, 16);
      if (ec != std::errc() || p != line.data() + 2 * i + 2) return;
      a.s6_addr[i] = static_cast<std::uint8_t>(v);
    }
    if (IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_LINKLOCAL(&a)) return;
    char text[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET6, &a, text, sizeof text);
    out.push_back(std::string(text) + "/128");
  });
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<std::string> address_ranges_of(pid_t pid) {
  auto slurp = [pid](const char* name) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  if (pid <= 0) return {};
  return local_address_ranges(slurp("fib_trie"), slurp("if_inet6"));
}

std::string Subnet4::host(std::uint32_t index) const {
  in_addr a{htonl(base + index)};
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

std::string Subnet4::cidr() const {
  return host(0) + "/" + std::to_string(prefix);
}

bool Subnet4::overlaps(const Subnet4& other) const {
  const int p = std::min(prefix, other.prefix);
  const std::uint32_t mask = p == 0 ? 0 : ~std::uint32_t{0} << (32 - p);
  return (base & mask) == (other.base & mask);
}

std::optional<Subnet4> parse_subnet4(const std::string& cidr) {
  const auto slash = cidr.find('/');
  if (slash == std::string::npos) return std::nullopt;
  in_addr a{};
  if (::inet_pton(AF_INET, cidr.substr(0, slash).c_str(), &a) != 1) return std::nullopt;
  int prefix = -1;
  try {
    std::size_t used = 0;
    prefix = std::stoi(cidr.substr(slash + 1), &used);
    if (used != cidr.size() - slash - 1) return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (prefix < 0 || prefix > 32) return std::nullopt;
  const std::uint32_t mask = prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
  return Subnet4{ntohl(a.s_addr) & mask, prefix};
}

std::vector<Subnet4> host_routes() {
  std::vector<Subnet4> out;
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string iface, dest, gw, flags, refcnt, use, metric, mask;
    if (!(f >> iface >> dest >> gw >> flags >> refcnt >> use >> metric >> mask)) continue;
    // Little-endian hex of network-order values.
    const std::uint32_t d = ntohl(static_cast<std::uint32_t>(std::stoul(dest, nullptr, 16)));
    const std::uint32_t m = ntohl(static_cast<std::uint32_t>(std::stoul(mask, nullptr, 16)));
    if (m == 0) continue;  // the default route overlaps everything; it is not a subnet
    out.push_back(Subnet4{d & m, __builtin_popcount(m)});
  }
  return out;
}

std::optional<Subnet4> choose_subnet(const Subnet4& pool, int prefix,
                                     const std::vector<Subnet4>& taken, std::uint64_t seed) {
  if (prefix < pool.prefix || prefix > 30) return std::nullopt;
  const std::uint64_t count = std::uint64_t{1} << (prefix - pool.prefix);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t slot = (seed + i) % count;
    Subnet4 s{pool.base + static_cast<std::uint32_t>(slot << (32 - prefix)), prefix};
    bool clash = false;
    for (const auto& t : taken) clash = clash || s.overlaps(t);
    if (!clash) return s;
  }
  return std::nullopt;
}

}  // namespace vibepit::launcher
