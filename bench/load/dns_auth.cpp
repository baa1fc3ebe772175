// `dns-auth`: a fast authoritative DNS server for the DNS benchmarks, so that the upstream is
// never what limits a cache-miss stream. UDP only. Names at or under a --zone get one A
// record (--addr, with the zone's TTL); other names get NXDOMAIN. One SO_REUSEPORT socket
// per thread, datagrams moved in batches with recvmmsg/sendmmsg.
#include "common.hpp"
#include "modes.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cstring>
#include <thread>

namespace vibepit::bench {
namespace {

constexpr int kBatch = 64;
constexpr std::size_t kMaxMsg = 1500;

struct Zone {
  std::string name;
  std::uint32_t ttl = 0;
};

struct AuthOptions {
  std::string listen;
  std::vector<std::string> zone_flags;  // "NAME" or "NAME:TTL"
  std::vector<Zone> zones;
  std::string addr = "198.51.100.10";
  unsigned threads = 1;
  double duration_s = 3600;
};

// The question's name in lower case, and where the question ends; false when malformed.
bool read_question(const std::uint8_t* m, std::size_t len, std::string& name, std::size_t& end) {
  std::size_t off = 12;
  name.clear();
  while (off < len) {
    std::uint8_t n = m[off++];
    if (n == 0) {
      if (off + 4 > len) return false;
      end = off + 4;
      return true;
    }
    if (n > 63 || off + n > len) return false;  // no compression in a question
    if (!name.empty()) name.push_back('.');
    for (std::size_t i = 0; i < n; ++i) {
      char c = static_cast<char>(m[off + i]);
      name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    }
    off += n;
  }
  return false;
}

const Zone* find_zone(const std::string& name, const std::vector<Zone>& zones) {
  for (const auto& z : zones) {
    const auto& n = z.name;
    if (name == n) return &z;
    if (name.size() > n.size() && name.ends_with(n) && name[name.size() - n.size() - 1] == '.') {
      return &z;
    }
  }
  return nullptr;
}

// Write the reply to `q` into `out`; 0 for no reply.
std::size_t answer(const std::uint8_t* q, std::size_t len, const AuthOptions& o,
                   const std::array<std::uint8_t, 4>& a, std::uint8_t* out) {
  if (len < 12 || (q[2] & 0x80)) return 0;  // runt or a response
  std::string name;
  std::size_t qend = 0;
  bool ok = q[4] == 0 && q[5] == 1 && read_question(q, len, name, qend);
  std::memcpy(out, q, 2);
  out[2] = static_cast<std::uint8_t>(0x84 | (q[2] & 0x01));  // QR AA, RD copied
  out[3] = 0;
  std::memset(out + 4, 0, 8);
  if (!ok) {
    out[3] = 1;  // FORMERR
    return 12;
  }
  std::memcpy(out + 12, q + 12, qend - 12);
  out[5] = 1;
  std::uint16_t qtype = static_cast<std::uint16_t>((q[qend - 4] << 8) | q[qend - 3]);
  std::size_t n = qend;
  const Zone* zone = find_zone(name, o.zones);
  if (!zone) {
    out[3] = 3;  // NXDOMAIN
    return n;
  }
  const std::uint32_t ttl = zone->ttl;
  if (qtype == 1) {
    out[7] = 1;
    const std::uint8_t rr[] = {0xc0,
                               0x0c,
                               0,
                               1,
                               0,
                               1,
                               static_cast<std::uint8_t>(ttl >> 24),
                               static_cast<std::uint8_t>(ttl >> 16),
                               static_cast<std::uint8_t>(ttl >> 8),
                               static_cast<std::uint8_t>(ttl),
                               0,
                               4,
                               a[0],
                               a[1],
                               a[2],
                               a[3]};
    std::memcpy(out + n, rr, sizeof rr);
    n += sizeof rr;
  }
  return n;  // NODATA for other types
}

void serve_thread(int fd, const AuthOptions& o, const std::array<std::uint8_t, 4>& a,
                  std::atomic<std::uint64_t>& served, Clock::time_point until) {
  std::vector<std::array<std::uint8_t, kMaxMsg>> in(kBatch), out(kBatch);
  std::array<sockaddr_storage, kBatch> from{};
  std::array<iovec, kBatch> iov_in{}, iov_out{};
  std::array<mmsghdr, kBatch> msgs_in{}, msgs_out{};
  timeval tv{0, 200'000};  // wake up to check the clock and the stop flag
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::uint64_t local = 0;
  while (!stop_requested() && Clock::now() < until) {
    for (int i = 0; i < kBatch; ++i) {
      iov_in[i] = {in[i].data(), kMaxMsg};
      msgs_in[i].msg_hdr = {};
      msgs_in[i].msg_hdr.msg_name = &from[i];
      msgs_in[i].msg_hdr.msg_namelen = sizeof from[i];
      msgs_in[i].msg_hdr.msg_iov = &iov_in[i];
      msgs_in[i].msg_hdr.msg_iovlen = 1;
    }
    int got = ::recvmmsg(fd, msgs_in.data(), kBatch, MSG_WAITFORONE, nullptr);
    if (got <= 0) continue;
    int replies = 0;
    for (int i = 0; i < got; ++i) {
      std::size_t n = answer(in[i].data(), msgs_in[i].msg_len, o, a, out[replies].data());
      if (n == 0) continue;
      iov_out[replies] = {out[replies].data(), n};
      msgs_out[replies].msg_hdr = {};
      msgs_out[replies].msg_hdr.msg_name = &from[i];
      msgs_out[replies].msg_hdr.msg_namelen = msgs_in[i].msg_hdr.msg_namelen;
      msgs_out[replies].msg_hdr.msg_iov = &iov_out[replies];
      msgs_out[replies].msg_hdr.msg_iovlen = 1;
      ++replies;
    }
    if (replies > 0) ::sendmmsg(fd, msgs_out.data(), static_cast<unsigned>(replies), 0);
    local += static_cast<std::uint64_t>(replies);
  }
  served += local;
}

ModeResult run_dns_auth(const AuthOptions& o) {
  auto hp = parse_proxy(o.listen);
  if (!hp) throw ConfigError("--listen must be ADDR:PORT, got " + o.listen);
  in_addr ia{};
  if (::inet_pton(AF_INET, o.addr.c_str(), &ia) != 1) {
    throw ConfigError("--addr must be an IPv4 address, got " + o.addr);
  }
  std::array<std::uint8_t, 4> a{};
  std::memcpy(a.data(), &ia, 4);
  auto ep = resolve_endpoint(*hp, true);
  std::vector<int> fds;
  for (unsigned t = 0; t < std::max(1u, o.threads); ++t) {
    int fd = ::socket(ep.protocol().family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    if (fd < 0 || ::bind(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0) {
      throw ConfigError("cannot bind " + o.listen + ": " + std::strerror(errno));
    }
    fds.push_back(fd);
  }
  auto start = Clock::now();
  auto until = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(o.duration_s));
  std::atomic<std::uint64_t> served{0};
  std::vector<std::thread> threads;
  for (int fd : fds) {
    threads.emplace_back([&, fd] { serve_thread(fd, o, a, served, until); });
  }
  for (auto& t : threads) t.join();
  for (int fd : fds) ::close(fd);
  nlohmann::ordered_json j;
  j["mode"] = "dns-auth";
  j["listen"] = o.listen;
  j["answers"] = served.load();
  j["elapsed_s"] = seconds_between(start, Clock::now());
  return {j, true};
}

}  // namespace

void add_dns_auth(CLI::App& app, Runner& runner) {
  auto opts = std::make_shared<AuthOptions>();
  auto* cmd = app.add_subcommand("dns-auth", "Fast authoritative DNS server (UDP) for benchmarks");
  cmd->add_option("--listen", opts->listen, "ADDR:PORT")->required();
  cmd->add_option("--zone", opts->zone_flags,
                  "ZONE[:TTL]: names at or under ZONE get an A record with TTL seconds "
                  "(default 0: nothing may cache them); repeatable")
      ->required();
  cmd->add_option("--addr", opts->addr, "The address every A record holds");
  cmd->add_option("--threads", opts->threads, "Sockets and threads (SO_REUSEPORT)");
  cmd->add_option("--duration", opts->duration_s, "Seconds to serve");
  cmd->callback([opts, &runner] {
    for (const auto& flag : opts->zone_flags) {
      Zone z;
      auto colon = flag.find(':');
      z.name = flag.substr(0, colon);
      for (auto& c : z.name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (colon != std::string::npos) {
        try {
          z.ttl = static_cast<std::uint32_t>(std::stoul(flag.substr(colon + 1)));
        } catch (const std::exception&) {
          throw CLI::ValidationError("--zone", "bad TTL in " + flag);
        }
      }
      opts->zones.push_back(std::move(z));
    }
    runner = [opts] { return run_dns_auth(*opts); };
  });
}

}  // namespace vibepit::bench
