#pragma once
// Message framing (RFC 9112 section 6) and the smuggling checks a forward proxy needs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "vibepit/http/authority.hpp"
#include "vibepit/http/head.hpp"

namespace vibepit::http {

enum class BodyKind { none, length, chunked, until_close };

struct Framing {
  BodyKind kind = BodyKind::none;
  std::uint64_t length = 0;  // for BodyKind::length
};

struct FramingError {
  // e.g. "both Content-Length and Transfer-Encoding", "conflicting Content-Length"
  std::string what;
};

// Request framing. Refuses: Content-Length together with Transfer-Encoding, conflicting or
// malformed Content-Length values, any transfer-coding list whose final coding is not
// "chunked" (or that names chunked more than once), and Transfer-Encoding on HTTP/1.0.
std::variant<Framing, FramingError> request_framing(const RequestHead& head);
// Response framing, given the request method (HEAD) and the status (1xx, 204, 304).
// Content-Length with Transfer-Encoding, or chunked twice or not last, is refused too.
std::variant<Framing, FramingError> response_framing(const ResponseHead& head,
                                                     std::string_view request_method);

// Incremental validator for a chunked body. Feed it bytes as they arrive; it says how many
// of them belong to the body, so the raw bytes can be forwarded unchanged and the message
// end is known. Chunk sizes are hex without overflow; extensions and trailers are bounded.
// Every line inside the body must end in CRLF: the bytes go on to a next hop that may not
// read a bare LF as we would. max_line bounds a size line or trailer line without its CRLF;
// max_trailers bounds the whole trailer section including the final CRLF.
class ChunkedDecoder {
 public:
  enum class Status { need_more, done, error };
  struct Step {
    Status status = Status::need_more;
    std::size_t consumed = 0;  // bytes of `data` that belong to this body
  };
  explicit ChunkedDecoder(std::size_t max_line = 4096, std::size_t max_trailers = 16384);
  Step feed(std::string_view data);
  // The same, and append the chunk data among the consumed bytes to `payload`: for a
  // client that wants the body itself rather than its framing (the Docker client).
  Step feed(std::string_view data, std::string& payload);
  std::string_view error() const { return error_; }

 private:
  enum class State {
    size,           // hex digits of the chunk size
    size_ws,        // whitespace after the size; only a chunk extension may follow
    size_ext,       // chunk extension, up to CR
    size_lf,        // CR seen at the end of the size line
    data,           // chunk data
    data_cr,        // CR expected after the data
    data_lf,        // LF expected after the data
    trailer_start,  // start of a trailer line, or CR of the final CRLF
    trailer_name,   // trailer field name
    trailer_value,  // trailer field value, up to CR
    trailer_lf,     // LF expected at the end of a trailer line
    final_lf,       // LF of the final CRLF
    done,
    failed,
  };
  Step feed_into(std::string_view data, std::string* payload);
  bool step(unsigned char c);  // one byte outside chunk data; false on error
  bool fail(std::string_view why);

  State state_ = State::size;
  std::uint64_t remaining_ = 0;
  std::size_t size_digits_ = 0;
  std::size_t line_len_ = 0;
  std::size_t trailer_bytes_ = 0;
  std::size_t max_line_;
  std::size_t max_trailers_;
  std::string_view error_;
};

// The head to send upstream for an absolute-form request: origin-form request line, the
// client's headers minus hop-by-hop ones (Connection and the headers it lists,
// Proxy-Connection, Proxy-Authorization, Keep-Alive, TE, Upgrade, Trailer), and the
// given Host value as the first field. Content-Length and Transfer-Encoding always stay,
// even when Connection names them, because the body is forwarded raw; a valid
// Content-Length goes on as one field in canonical form ("5" for "005", "5, 5" or two
// equal fields). With `drop_expect` the Expect field goes too (whatever its case): the
// proxy answers 100-continue itself. origin_path and host_header are copied as they are:
// pass values from parse_target / Authority::display().
std::string rewrite_request_head(const RequestHead& head, std::string_view origin_path,
                                 std::string_view host_header, bool drop_expect = false);
// The same head appended to `out`, with the Host field written from `authority` as
// Authority::display() would, without the port when it is `default_port` (80 for http,
// 443 for https). The proxy writes into a buffer it keeps between requests: no string of
// its own.
void append_request_head(std::string& out, const RequestHead& head, std::string_view origin_path,
                         const Authority& authority, bool drop_expect = false,
                         std::uint16_t default_port = 80);
// The response head to send the client ("HTTP/1.1 <status> <reason>"), with hop-by-hop
// headers removed (as above, plus Proxy-Authenticate); framing fields stay, a valid
// Content-Length in canonical form.
std::string rewrite_response_head(const ResponseHead& head);
// The same head appended to `out`; `extra_fields` (whole lines, each ending in CRLF, such as
// "Connection: close\r\n") go after the kept fields.
void append_response_head(std::string& out, const ResponseHead& head,
                          std::string_view extra_fields = {});

// Whether the client asked to keep the connection open (version default and Connection).
bool wants_keep_alive(int version_minor, const std::vector<Header>& headers);

}  // namespace vibepit::http
