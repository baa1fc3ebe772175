#pragma once
// Credentials the proxy adds to the requests it sends to their host (docs/credentials.md).
// The public half (name, host, header, format) is parsed, shown and matched here. The value
// is held in secret memory (secret.hpp): the policy keeps it, already formatted as the
// header's value, and never shows it.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "vibepit/policy/rules.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::policy {

struct CredentialSpec {
  std::string name;    // letters, digits and '_', not starting with a digit; at most 64
  HttpRule host;       // DOMAIN:PORT or IP:PORT (globs as in allow-http), no methods or path
  std::string header;  // a field name, as given; matched without regard to case
  // The header's value: `{}` (once) stands for the secret, as in "Bearer {}"; or
  // "basic:USER", for "Basic " and the base64 of "USER:" and the secret.
  std::string format;
  // Canonical text, never a value: "NAME=HOST:PORT,header=H,format=F".
  std::string text() const;
};

inline constexpr std::string_view kDefaultCredentialHeader = "Authorization";
inline constexpr std::string_view kDefaultCredentialFormat = "Bearer {}";

// `NAME=HOST:PORT[,header=H][,format=F]`. Options other than header and format are errors,
// unless `extra` is given: then they are moved there as (key, value), a value-less option
// with an empty value, for the caller to judge (the launcher's file=PATH, say).
std::variant<CredentialSpec, RuleError> parse_credential(
    std::string_view text, std::vector<std::pair<std::string, std::string>>* extra = nullptr);
// The same from separate parts (config, control API); empty header or format: the default.
std::variant<CredentialSpec, RuleError> make_credential(std::string_view name,
                                                        std::string_view host,
                                                        std::string_view header,
                                                        std::string_view format);

// Why `secret` cannot be a credential's value (empty, too long, or a control byte such as
// CR, LF or NUL, which would let it write further header lines), or empty when it can. The
// answer never quotes the value.
std::string secret_problem(std::string_view secret);

// The header value for `secret`, formatted by the spec, in secret memory. Throws
// std::invalid_argument with secret_problem's answer.
std::shared_ptr<const secret::SecretBytes> header_value(const CredentialSpec& spec,
                                                        std::string_view secret);

struct Credential {
  CredentialSpec spec;
  secret::SharedSecret value;  // the header's whole value, formatted
};
using Credentials = std::vector<Credential>;

// Whether two credentials would set the same header on the same host text (of which only
// the first would reach the request): the rule every list of credentials keeps.
bool same_header_same_host(const CredentialSpec& a, const CredentialSpec& b);

// Whether the credential's host names host:port. `key` is a normalised name or canonical IP
// text, as the HTTP rules are matched.
bool credential_matches(const CredentialSpec& spec, std::string_view key, std::uint16_t port);

}  // namespace vibepit::policy
