// libFuzzer target: answers_query(), the test the UDP forwarder (dns/src/udp_upstream.cpp)
// applies to every datagram from an upstream before it ends a query with it. The input is a
// datagram offered as the answer to a fixed query we sent. Checked against the strict
// parser, which was written apart from it: an answer parse_response accepts for that query,
// with the query's ID, must match; and one that matches must have the question parse_response
// expects (no question_mismatch, no bad_qdcount), whatever else is wrong with it.
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.hpp"
#include "vibepit/dns/wire.hpp"

namespace {

using namespace vibepit;
using Bytes = std::vector<std::uint8_t>;

// Api.Example.com AAAA, as build_upstream_query makes it: our ID, RD, and an OPT record.
const Bytes kSent = {0xbe, 0xef, 0x01, 0x00, 0,   1,   0,    0,    0,   0, 0,   1,   3,   'A', 'p',
                     'i',  7,    'E',  'x',  'a', 'm', 'p',  'l',  'e', 3, 'c', 'o', 'm', 0,   0,
                     28,   0,    1,    0,    0,   41,  0x04, 0xd0, 0,   0, 0,   0,   0,   0};
constexpr std::size_t kQuestionEnd = 12 + 17 + 4;

const dns::Query& query() {
  static const dns::Query q = [] {
    dns::Query out;
    CHECK(dns::parse_query(kSent, out) == dns::WireError::none);
    CHECK(out.question_end == kQuestionEnd);
    return out;
  }();
  return q;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  const bool match = dns::answers_query(in, kSent, kQuestionEnd);
  dns::ResponseInfo info;
  const dns::WireError e = dns::parse_response(in, query(), info);
  const bool same_id = size >= 2 && data[0] == kSent[0] && data[1] == kSent[1];
  if (e == dns::WireError::none && same_id) CHECK(match);
  if (match) {
    CHECK(same_id);
    CHECK(e != dns::WireError::question_mismatch);
    CHECK(e != dns::WireError::bad_qdcount);
  }
  return 0;
}
