// Opening a connection to the target: direct TCP, or a CONNECT tunnel through the proxy.
#pragma once

#include "worker.hpp"

#include <span>
#include <string_view>

namespace vibepit::bench {

// Where a client connects first, and what it sends there.
struct Route {
  tcp::endpoint first_hop;      // the proxy, or the target itself when direct
  std::string connect_request;  // empty when direct
  bool via_proxy() const { return !connect_request.empty(); }
};

// Builds the route from --proxy and --target; resolves at start-up only.
// `fields`: further header lines for the CONNECT, each ending in CRLF (proxy_auth_field).
Route make_route(const std::optional<HostPort>& proxy, const HostPort& target,
                 std::string_view fields = {});

enum class OpenStatus { ok, connect_failed, proxy_status, proxy_header, io, timeout };

// Adds one failure of the given kind to the counters (ok adds nothing).
void count_open_error(Errors& e, OpenStatus s);

// Connects and, through a proxy, sends the CONNECT and waits for its 200.
// Bytes that followed the proxy's answer are left in buf[0, extra). `early`, through a
// proxy, goes in the same write as the CONNECT (the tunnel's first bytes, sent before the
// 200 as a client that pipelines does); direct, it is not sent.
asio::awaitable<OpenStatus> open_tunnel(Conn& c, const Route& route, Clock::duration timeout,
                                        std::span<char> buf, std::size_t& extra,
                                        std::string_view early = {});

// Headers of the proxy's CONNECT answer may use at most this much of `buf`.
inline constexpr std::size_t kMaxConnectAnswer = 4096;

}  // namespace vibepit::bench
