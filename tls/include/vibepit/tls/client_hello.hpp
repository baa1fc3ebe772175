#pragma once
// The TLS ClientHello, read from the first bytes a client sends into a CONNECT tunnel, for
// the name it asks for (server_name, RFC 6066) and nothing else. The reader takes the bytes
// as they arrive, in any split over TCP segments and over TLS records, and says when it has
// seen enough: a whole ClientHello, bytes that are no TLS, or a malformed or oversized one.
//
// It is as strict as the servers behind it, where leniency would let a name slip past: a
// second server_name extension, a second name in the list, or any repeated extension makes
// the ClientHello malformed, as do lengths that disagree, so that no server can read a name
// that this reader did not see. With Encrypted Client Hello the name here is the outer
// (public) one; the inner ClientHello is encrypted, and is not read.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vibepit::tls {

// The bounds (docs/config.md "tunnel-tls"). A ClientHello message of up to 16 KiB (real ones
// are 200 B to 2 KiB, post-quantum key shares included), carried in records that, headers
// and all, take at most 20 KiB: a client that splits its ClientHello into more, smaller
// records than that allows is refused as oversized.
inline constexpr std::size_t kMaxHelloMessage = 16 * 1024;
inline constexpr std::size_t kMaxHelloBytes = 20 * 1024;
inline constexpr std::size_t kMaxExtensions = 128;

enum class HelloStatus {
  need_more,  // a prefix of a ClientHello so far
  complete,   // a whole ClientHello: server_name() and the rest are set
  not_tls,    // the first bytes are not a TLS handshake record
  malformed,  // a TLS record, but no well-formed ClientHello: error() says what
  too_large,  // past the bounds above before the ClientHello was whole
};

class HelloReader {
 public:
  // The next bytes from the client. Once the status is other than need_more it stays, and
  // further bytes are not looked at.
  HelloStatus feed(std::string_view bytes);
  HelloStatus status() const { return status_; }
  // For malformed and too_large: what is wrong, static text.
  std::string_view error() const { return error_; }

  // For complete: the host_name the client asked for, as sent (no case folding).
  bool has_server_name() const { return has_name_; }
  const std::string& server_name() const { return name_; }
  bool has_ech() const { return ech_; }  // an encrypted_client_hello extension (outer)
  std::uint16_t legacy_version() const { return version_; }
  std::size_t bytes_seen() const { return seen_; }  // read so far (bytes after a verdict are not)

 private:
  HelloStatus fail(HelloStatus s, const char* why);
  HelloStatus parse(std::string_view message);

  HelloStatus status_ = HelloStatus::need_more;
  const char* error_ = "";
  std::size_t seen_ = 0;
  unsigned char header_[5] = {};  // the record header being read
  std::size_t header_len_ = 0;
  std::size_t record_left_ = 0;  // payload bytes of the current record still to come
  bool first_record_ = true;
  std::string message_;  // handshake bytes gathered, when the message spans feeds or records
  std::string name_;
  bool has_name_ = false;
  bool ech_ = false;
  std::uint16_t version_ = 0;
};

// One pass over bytes that may hold a whole ClientHello.
HelloReader read_client_hello(std::string_view bytes);

// True when the ClientHello's name is `host` as DNS names compare: ASCII case-insensitive,
// one trailing dot ignored on either side. `host` is a CONNECT host (a normalised name or
// an IP literal's canonical text).
bool same_name(std::string_view server_name, std::string_view host);

// A server name fit for a record or message, in quotes: printable ASCII but for '"' and
// '\' as is, every other byte as \xNN.
std::string quoted_name(std::string_view server_name);

std::string_view to_string(HelloStatus s);

}  // namespace vibepit::tls
