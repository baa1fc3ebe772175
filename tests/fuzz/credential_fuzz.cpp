// libFuzzer target: the credential grammar (NAME=HOST:PORT[,header=H][,format=F]) and the
// formatting of a value into a header. The input is "SPEC\nVALUE". Invariants, checked with
// CHECK (which aborts in release builds too): an accepted spec prints as text that parses to
// the same spec; a header value is one line (no CR, LF or NUL), holds the value or its base64,
// and an error is one of a few fixed texts, so it never quotes the value.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz_check.hpp"
#include "vibepit/policy/credential.hpp"

namespace {

using namespace vibepit::policy;

void check_value(const CredentialSpec& spec, std::string_view value) {
  try {
    const auto v = header_value(spec, value);
    const auto text = v->reveal();
    CHECK(secret_problem(value).empty());
    CHECK(text.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos);
    if (spec.format.starts_with("basic:")) {
      CHECK(text.starts_with("Basic "));
      CHECK((text.size() - 6) % 4 == 0);
    } else {
      CHECK(text.find(value) != std::string_view::npos);
      CHECK(text.size() == spec.format.size() - 2 + value.size());
    }
  } catch (const std::invalid_argument& e) {
    // The error is one of a closed set of fixed texts, so no byte of the value can be in it
    // (a value may still happen to equal a piece of one: "ret " is in "secret starts").
    static const std::set<std::string> kProblems = {
        secret_problem(""),
        secret_problem(std::string(vibepit::secret::SecretBytes::kMaxValue + 1, 'a')),
        secret_problem("\n"), secret_problem(" a")};
    CHECK(secret_problem(value) == e.what());
    CHECK(kProblems.count(e.what()) == 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto nl = in.find('\n');
  const auto text = in.substr(0, nl);
  const auto value = nl == std::string_view::npos ? std::string_view{} : in.substr(nl + 1);
  auto parsed = parse_credential(text);
  if (auto* e = std::get_if<RuleError>(&parsed)) {
    CHECK(e->list == "credentials");
    CHECK(!e->what.empty());
    return 0;
  }
  const auto& spec = std::get<CredentialSpec>(parsed);
  CHECK(!spec.host.request);
  CHECK(!spec.header.empty() && !spec.format.empty());
  auto again = parse_credential(spec.text());
  CHECK(std::holds_alternative<CredentialSpec>(again));
  CHECK(std::get<CredentialSpec>(again).text() == spec.text());
  check_value(spec, value);
  return 0;
}
