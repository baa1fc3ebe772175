// libFuzzer target: the credential grammar (NAME=HOST:PORT[,header=H][,format=F]) and the
// formatting of a value into a header. The input is "SPEC\nVALUE". Invariants, checked with
// CHECK (which aborts in release builds too): an accepted spec prints as text that parses to
// the same spec; a header value is one line (no CR, LF or NUL), holds the value or its base64,
// and an error is one of a few fixed texts, so it never quotes the value. The VALUE part is
// also read as a tenant's token file: the tokens accepted, joined by line ends, are the text
// (less the "\r" before a line end), and an error is a line number and a fixed text.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "fuzz_check.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/policy/tenant.hpp"

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

void check_token_file(std::string_view text) {
  try {
    const auto tokens = split_tenant_tokens(text);
    CHECK(tokens[0] != nullptr);
    std::string joined;
    for (const auto& t : tokens) {
      if (!t) continue;
      CHECK(tenant_token_problem(t->reveal()).empty());
      if (!joined.empty()) joined += '\n';
      joined += t->reveal();
    }
    std::string expected(text);
    for (auto at = expected.find("\r\n"); at != std::string::npos; at = expected.find("\r\n"))
      expected.erase(at, 1);
    if (expected.ends_with('\r')) expected.pop_back();
    CHECK(joined == expected);
  } catch (const std::invalid_argument& e) {
    const std::string_view why = e.what();
    static const std::set<std::string> kProblems = {tenant_token_problem(""),
                                                    tenant_token_problem(std::string(1025, 'a')),
                                                    tenant_token_problem(std::string(16, ' '))};
    if (why.starts_with("line ")) {
      const auto colon = why.find(": ");
      CHECK(colon != std::string_view::npos);
      CHECK(kProblems.count(std::string(why.substr(colon + 2))) == 1);
    } else {
      CHECK(why == "more than 2 lines: a tenant has one token, or two while it changes");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto nl = in.find('\n');
  const auto text = in.substr(0, nl);
  const auto value = nl == std::string_view::npos ? std::string_view{} : in.substr(nl + 1);
  check_token_file(value);
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
