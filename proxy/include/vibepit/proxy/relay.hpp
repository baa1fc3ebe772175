#pragma once
// The tunnel relay: two half-duplex pumps. Each direction keeps at most one read in flight
// and reads again only after its write completed (that is the backpressure). EOF on one
// side shuts down the other side's send direction; EOF on both, or any error, closes both.
// With splice, bytes move socket -> pipe -> socket inside the kernel.
#include <cstdint>
#include <functional>

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include "vibepit/proxy/tunnel_check.hpp"

namespace vibepit::proxy {

struct RelayStats {
  std::uint64_t up = 0;    // client -> upstream
  std::uint64_t down = 0;  // upstream -> client
  bool spliced = false;    // at least one direction used splice
};

// Relay until both directions finished or either side failed. `upstream` has not been read
// from (as after Worker's connect): its pump's first wait is for the next edge. `on_activity` is
// called whenever bytes move (the caller's idle deadline). Neither socket needs a buffer while the
// tunnel is idle: pumps wait for readiness first.
//
// `check`, when given and still pending, judges the client's first bytes (the SNI check):
// until it passes them nothing reaches `upstream`, while `upstream`'s bytes reach the client
// (a server that speaks first is served). On its refusal, the relay ends with both sockets
// closed and no byte sent upstream.
asio::awaitable<void> relay(asio::ip::tcp::socket& client, asio::ip::tcp::socket& upstream,
                            bool use_splice, const std::function<void()>& on_activity,
                            RelayStats& stats, TunnelCheck* check = nullptr);

}  // namespace vibepit::proxy
