#pragma once
// ClientHellos built for tests: a handshake message with chosen extensions, framed in TLS
// records of a chosen size. Enough of TLS to test a reader of the first flight, no more.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace vibepit::tls::hello_builder {

inline std::string u16(std::size_t v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
}
inline std::string u24(std::size_t v) {
  return {static_cast<char>(v >> 16), static_cast<char>((v >> 8) & 0xff),
          static_cast<char>(v & 0xff)};
}

inline std::string extension(std::uint16_t type, const std::string& data) {
  return u16(type) + u16(data.size()) + data;
}
inline std::string sni_extension(const std::vector<std::pair<int, std::string>>& names) {
  std::string list;
  for (const auto& [type, name] : names) list += static_cast<char>(type) + u16(name.size()) + name;
  return extension(0, u16(list.size()) + list);
}
inline std::string sni_extension(const std::string& name) {
  return sni_extension({{0, name}});
}

// A ClientHello handshake message (header included) with these extensions, or with none
// at all (`extensions` nullopt: the TLS 1.2 form without the extensions block).
inline std::string hello_message(const std::optional<std::string>& extensions) {
  std::string body = "\x03\x03" + std::string(32, 'r');  // version, random
  body += '\x20' + std::string(32, 's');                 // session id
  body += u16(4) + std::string("\x13\x01\x13\x02", 4);   // two cipher suites
  body += std::string("\x01\x00", 2);                    // compression: null
  if (extensions) body += u16(extensions->size()) + *extensions;
  return std::string(1, '\x01') + u24(body.size()) + body;
}

// `message` in TLS handshake records of at most `per_record` payload bytes each.
inline std::string in_records(const std::string& message, std::size_t per_record = 16384) {
  std::string out;
  for (std::size_t at = 0; at < message.size(); at += per_record) {
    const auto part = message.substr(at, per_record);
    out += std::string("\x16\x03\x01", 3) + u16(part.size()) + part;
  }
  return out;
}

inline std::string hello(const std::string& extensions) {
  return in_records(hello_message(extensions));
}

}  // namespace vibepit::tls::hello_builder
