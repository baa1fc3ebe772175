#include "vibepit/tls/client_hello.hpp"

#include <algorithm>
#include <array>

namespace vibepit::tls {
namespace {

constexpr unsigned char kHandshake = 22;              // TLSPlaintext.type
constexpr unsigned char kClientHello = 1;             // HandshakeType
constexpr std::size_t kMaxRecordPayload = 16 * 1024;  // 2^14 (RFC 8446 5.1)
constexpr std::uint16_t kServerName = 0;
constexpr std::uint16_t kEncryptedClientHello = 0xfe0d;

// A view read front to back; every read is checked, and a short one marks it failed.
class Cursor {
 public:
  explicit Cursor(std::string_view b) : b_(b) {}
  bool ok() const { return ok_; }
  bool empty() const { return b_.empty(); }
  std::uint32_t u8() { return take(1); }
  std::uint32_t u16() { return take(2); }
  std::uint32_t u24() { return take(3); }
  std::string_view bytes(std::size_t n) {
    if (!ok_ || n > b_.size()) {
      ok_ = false;
      return {};
    }
    auto out = b_.substr(0, n);
    b_.remove_prefix(n);
    return out;
  }

 private:
  std::uint32_t take(std::size_t n) {
    auto v = bytes(n);
    std::uint32_t out = 0;
    for (char c : v) out = (out << 8) | static_cast<unsigned char>(c);
    return out;
  }
  std::string_view b_;
  bool ok_ = true;
};

}  // namespace

HelloStatus HelloReader::fail(HelloStatus s, const char* why) {
  status_ = s;
  error_ = why;
  has_name_ = false;  // a name read from a ClientHello that is not well-formed means nothing
  name_.clear();
  return s;
}

HelloStatus HelloReader::feed(std::string_view in) {
  if (status_ != HelloStatus::need_more) return status_;
  while (!in.empty()) {
    if (record_left_ == 0) {
      while (header_len_ < sizeof header_ && !in.empty()) {
        header_[header_len_++] = static_cast<unsigned char>(in.front());
        in.remove_prefix(1);
        ++seen_;
      }
      // The first byte decides whether this is TLS at all; the version's major byte too.
      if (first_record_ && header_[0] != kHandshake) return status_ = HelloStatus::not_tls;
      if (first_record_ && header_len_ >= 2 && header_[1] != 3) {
        return status_ = HelloStatus::not_tls;
      }
      if (header_len_ < sizeof header_) break;
      if (header_[0] != kHandshake) {
        return fail(HelloStatus::malformed,
                    "a record other than a handshake record came "
                    "before the ClientHello was whole");
      }
      if (header_[1] != 3) return fail(HelloStatus::malformed, "a record's version is not 3.x");
      record_left_ = (std::size_t{header_[3]} << 8) | header_[4];
      if (record_left_ == 0) return fail(HelloStatus::malformed, "an empty handshake record");
      if (record_left_ > kMaxRecordPayload) {
        return fail(HelloStatus::malformed, "a record longer than 16384 bytes");
      }
      header_len_ = 0;
      first_record_ = false;
    }
    const std::size_t take = std::min(in.size(), record_left_);
    const std::string_view payload = in.substr(0, take);
    in.remove_prefix(take);
    record_left_ -= take;
    seen_ += take;
    if (seen_ > kMaxHelloBytes) {
      return fail(HelloStatus::too_large,
                  "the ClientHello's records are longer than 20480 bytes in all");
    }
    // The usual case, a whole ClientHello in the first bytes of one read, is parsed where
    // it lies; anything split is gathered first.
    std::string_view message;
    if (message_.empty() && payload.size() >= 4) {
      message = payload;
    } else {
      message_.append(payload);
      message = message_;
    }
    if (message.size() < 4) continue;
    if (static_cast<unsigned char>(message[0]) != kClientHello) {
      return fail(HelloStatus::malformed, "the first handshake message is not a ClientHello");
    }
    Cursor c(message.substr(1, 3));
    const std::size_t length = 4 + c.u24();
    if (length > kMaxHelloMessage) {
      return fail(HelloStatus::too_large, "a ClientHello longer than 16384 bytes");
    }
    if (message.size() >= length) return parse(message.substr(4, length - 4));
    if (message.data() != message_.data()) message_.assign(message);
  }
  return status_;
}

// The ClientHello's body (RFC 8446 4.1.2; TLS 1.0 to 1.2 have the same layout, with
// extensions optional).
HelloStatus HelloReader::parse(std::string_view body) {
  Cursor c(body);
  version_ = static_cast<std::uint16_t>(c.u16());
  c.bytes(32);  // random
  const auto session_id = c.u8();
  if (session_id > 32) return fail(HelloStatus::malformed, "a session id longer than 32 bytes");
  c.bytes(session_id);
  const auto suites = c.u16();
  if (suites < 2 || suites % 2 != 0) {
    return fail(HelloStatus::malformed, "a malformed cipher suite list");
  }
  c.bytes(suites);
  const auto compression = c.u8();
  if (compression < 1) return fail(HelloStatus::malformed, "an empty compression method list");
  c.bytes(compression);
  if (!c.ok()) return fail(HelloStatus::malformed, "the ClientHello ends early");
  if (c.empty()) return status_ = HelloStatus::complete;  // no extensions (TLS 1.2 and older)

  const auto ext_len = c.u16();
  Cursor exts(c.bytes(ext_len));
  if (!c.ok() || !c.empty()) {
    return fail(HelloStatus::malformed, "the extensions' length disagrees with the ClientHello's");
  }
  std::array<std::uint16_t, kMaxExtensions> types{};
  std::size_t count = 0;
  while (!exts.empty()) {
    const auto type = static_cast<std::uint16_t>(exts.u16());
    Cursor data(exts.bytes(exts.u16()));
    if (!exts.ok()) return fail(HelloStatus::malformed, "an extension runs past the end");
    if (count == types.size()) return fail(HelloStatus::malformed, "more than 128 extensions");
    types[count++] = type;
    if (type == kEncryptedClientHello) ech_ = true;
    if (type != kServerName) continue;
    // ServerNameList: exactly one entry, a host_name, as OpenSSL and the rest accept it.
    Cursor list(data.bytes(data.u16()));
    if (!data.ok() || !data.empty() || list.empty()) {
      return fail(HelloStatus::malformed, "a malformed server_name extension");
    }
    const auto name_type = list.u8();
    const auto name = list.bytes(list.u16());
    if (!list.ok() || name_type != 0 || name.empty() || !list.empty()) {
      return fail(HelloStatus::malformed,
                  "a server_name extension that is not exactly one host_name");
    }
    name_.assign(name);
    has_name_ = true;
  }
  std::sort(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(count));
  if (std::adjacent_find(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(count)) !=
      types.begin() + static_cast<std::ptrdiff_t>(count)) {
    return fail(HelloStatus::malformed, "an extension appears twice");
  }
  return status_ = HelloStatus::complete;
}

HelloReader read_client_hello(std::string_view bytes) {
  HelloReader r;
  r.feed(bytes);
  return r;
}

bool same_name(std::string_view server_name, std::string_view host) {
  if (server_name.ends_with('.')) server_name.remove_suffix(1);
  if (host.ends_with('.')) host.remove_suffix(1);
  if (server_name.size() != host.size() || server_name.empty()) return false;
  auto lower = [](char ch) {
    return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
  };
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (lower(server_name[i]) != lower(host[i])) return false;
  }
  return true;
}

std::string quoted_name(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : name) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b < 0x7f && ch != '"' && ch != '\\') {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  out += '"';
  return out;
}

std::string_view to_string(HelloStatus s) {
  switch (s) {
    case HelloStatus::need_more:
      return "need_more";
    case HelloStatus::complete:
      return "complete";
    case HelloStatus::not_tls:
      return "not_tls";
    case HelloStatus::malformed:
      return "malformed";
    case HelloStatus::too_large:
      return "too_large";
  }
  return "unknown";
}

}  // namespace vibepit::tls
