#pragma once
// The conversions between the policy's address type and Asio's.
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

inline policy::IpAddr to_ip_addr(const asio::ip::address& a) {
  policy::IpAddr ip;
  if (a.is_v4()) {
    const auto b = a.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), ip.bytes.begin());
  } else {
    const auto b = a.to_v6().to_bytes();
    ip.v6 = true;
    std::copy(b.begin(), b.end(), ip.bytes.begin());
  }
  return ip;
}

}  // namespace vibepit::runtime
