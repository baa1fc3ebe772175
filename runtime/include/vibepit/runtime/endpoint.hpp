#pragma once
// The one conversion from the policy's address type to an Asio endpoint.
#include <algorithm>
#include <cstdint>

#include <asio/ip/tcp.hpp>

#include "vibepit/policy/ip.hpp"

namespace vibepit::runtime {

inline asio::ip::tcp::endpoint to_tcp_endpoint(const policy::IpAddr& ip, std::uint16_t port) {
  if (ip.v6) {
    asio::ip::address_v6::bytes_type b;
    std::copy(ip.bytes.begin(), ip.bytes.end(), b.begin());
    return {asio::ip::address_v6(b), port};
  }
  return {asio::ip::address_v4({ip.bytes[0], ip.bytes[1], ip.bytes[2], ip.bytes[3]}), port};
}

}  // namespace vibepit::runtime
