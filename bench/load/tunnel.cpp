#include "tunnel.hpp"

#include <algorithm>
#include <array>
#include <cstring>

namespace vibepit::bench {

Route make_route(const std::optional<HostPort>& proxy, const HostPort& target,
                 std::string_view fields) {
  Route r;
  if (proxy) {
    r.first_hop = resolve_endpoint(*proxy);
    auto authority = target.text();
    r.connect_request = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
                        "\r\nUser-Agent: vibepit-bench\r\n" + std::string(fields) + "\r\n";
  } else {
    r.first_hop = resolve_endpoint(target);
  }
  return r;
}

void count_open_error(Errors& e, OpenStatus s) {
  switch (s) {
    case OpenStatus::ok:
      break;
    case OpenStatus::connect_failed:
      ++e.connect;
      break;
    case OpenStatus::proxy_status:
      ++e.proxy_status;
      break;
    case OpenStatus::proxy_header:
      ++e.proxy_header;
      break;
    case OpenStatus::io:
      ++e.io;
      break;
    case OpenStatus::timeout:
      ++e.timeout;
      break;
  }
}

asio::awaitable<OpenStatus> open_tunnel(Conn& c, const Route& route, Clock::duration timeout,
                                        std::span<char> buf, std::size_t& extra,
                                        std::string_view early) {
  extra = 0;
  asio::error_code ec;
  c.arm(Clock::now(), timeout);
  co_await c.socket().async_connect(route.first_hop, with_ec(ec));
  if (ec) {
    c.disarm();
    co_return c.timed_out() ? OpenStatus::timeout : OpenStatus::connect_failed;
  }
  asio::error_code ignored;
  c.socket().set_option(tcp::no_delay(true), ignored);
  if (!route.via_proxy()) {
    c.disarm();
    co_return OpenStatus::ok;
  }

  const std::array<asio::const_buffer, 2> request{asio::buffer(route.connect_request),
                                                  asio::buffer(early)};
  co_await asio::async_write(c.socket(), request, with_ec(ec));
  const std::size_t limit = std::min(buf.size(), kMaxConnectAnswer);
  std::size_t have = 0;
  while (!ec) {
    if (have == limit) {
      c.disarm();
      co_return OpenStatus::proxy_header;
    }
    std::size_t n = co_await c.socket().async_read_some(
        asio::buffer(buf.data() + have, limit - have), with_ec(ec));
    if (ec) break;
    std::size_t from = have >= 3 ? have - 3 : 0;
    have += n;
    std::string_view view(buf.data(), have);
    auto end = view.find("\r\n\r\n", from);
    if (end == std::string_view::npos) continue;
    c.disarm();
    // "HTTP/1.x 200 ..." — anything else is a refusal or not a proxy at all.
    if (end < 12 || view.substr(0, 7) != "HTTP/1." || view[8] != ' ')
      co_return OpenStatus::proxy_header;
    if (view.substr(9, 3) != "200") co_return OpenStatus::proxy_status;
    extra = have - (end + 4);
    std::memmove(buf.data(), buf.data() + end + 4, extra);
    co_return OpenStatus::ok;
  }
  c.disarm();
  co_return c.timed_out() ? OpenStatus::timeout : OpenStatus::io;
}

}  // namespace vibepit::bench
