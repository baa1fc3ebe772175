// Credentials' public half: the grammar of NAME=HOST:PORT[,header=H][,format=F], and the
// formatting of a value into secret memory. Errors name the entry and the rule it breaks,
// and never quote a value.
#include "vibepit/policy/credential.hpp"

#include <array>
#include <stdexcept>

#include "vibepit/policy/name.hpp"

namespace vibepit::policy {
namespace {

constexpr std::size_t kMaxName = 64;
constexpr std::size_t kMaxHeader = 64;
constexpr std::size_t kMaxFormat = 256;
constexpr std::string_view kBasic = "basic:";

bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_tchar(char c) {
  return is_alpha(c) || is_digit(c) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}
bool is_visible(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x7f;
}

// Fields the proxy writes itself or that frame the message: a credential setting one could
// change where or how the request goes.
constexpr std::array<std::string_view, 12> kReserved = {"host",
                                                        "content-length",
                                                        "transfer-encoding",
                                                        "connection",
                                                        "keep-alive",
                                                        "te",
                                                        "trailer",
                                                        "upgrade",
                                                        "expect",
                                                        "proxy-authorization",
                                                        "proxy-authenticate",
                                                        "proxy-connection"};

std::string check_credential_name(std::string_view name) {
  if (name.empty()) return "missing NAME before '='";
  if (name.size() > kMaxName) return "NAME is longer than 64 characters";
  if (is_digit(name.front())) return "NAME must not start with a digit";
  for (char c : name) {
    if (!is_alpha(c) && !is_digit(c) && c != '_')
      return "NAME may hold only letters, digits and '_' (it names an environment variable)";
  }
  return {};
}

std::string check_header(std::string_view header) {
  if (header.empty()) return "empty header name";
  if (header.size() > kMaxHeader) return "header name longer than 64 characters";
  for (char c : header) {
    if (!is_tchar(c)) return "header name holds a character a field name may not";
  }
  for (auto r : kReserved) {
    if (iequals_ascii(header, r))
      return "header " + std::string(header) +
             " is not one a credential may set (the proxy writes it or it frames the request)";
  }
  return {};
}

std::string check_format(std::string_view format) {
  if (format.size() > kMaxFormat) return "format longer than 256 characters";
  for (char c : format) {
    if (!is_visible(c)) return "format holds a control or non-ASCII character";
  }
  if (format.starts_with(kBasic)) {
    const auto user = format.substr(kBasic.size());
    if (user.find(':') != std::string_view::npos) return "basic:USER: USER may not contain ':'";
    if (user.find("{}") != std::string_view::npos) return "basic:USER takes no {}";
    return {};
  }
  const auto at = format.find("{}");
  if (at == std::string_view::npos || format.find("{}", at + 2) != std::string_view::npos)
    return "format must hold {} (where the secret goes) exactly once, or be basic:USER";
  if (format.front() == ' ' || format.back() == ' ')
    return "format may not start or end with a space";
  return {};
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::size_t base64_size(std::size_t n) {
  return (n + 2) / 3 * 4;
}

// Base64 of the concatenation a + b, written at `out` (base64_size(a.size() + b.size()) bytes).
// It reads the two as one stream, so nothing joins them in ordinary memory first.
void base64_of(std::string_view a, std::string_view b, char* out) {
  const std::size_t n = a.size() + b.size();
  auto at = [&](std::size_t i) -> unsigned {
    return static_cast<unsigned char>(i < a.size() ? a[i] : b[i - a.size()]);
  };
  for (std::size_t i = 0; i < n; i += 3) {
    const unsigned v = at(i) << 16 | (i + 1 < n ? at(i + 1) << 8 : 0) | (i + 2 < n ? at(i + 2) : 0);
    *out++ = kBase64[(v >> 18) & 63];
    *out++ = kBase64[(v >> 12) & 63];
    *out++ = i + 1 < n ? kBase64[(v >> 6) & 63] : '=';
    *out++ = i + 2 < n ? kBase64[v & 63] : '=';
  }
}

RuleError error(std::string_view entry, std::string what) {
  return RuleError{"credentials", std::string(entry), std::move(what)};
}

}  // namespace

std::string CredentialSpec::text() const {
  return name + "=" + host.text + ",header=" + header + ",format=" + format;
}

std::variant<CredentialSpec, RuleError> make_credential(std::string_view name,
                                                        std::string_view host,
                                                        std::string_view header,
                                                        std::string_view format) {
  if (header.empty()) header = kDefaultCredentialHeader;
  if (format.empty()) format = kDefaultCredentialFormat;
  const std::string entry = std::string(name) + "=" + std::string(host) +
                            ",header=" + std::string(header) + ",format=" + std::string(format);
  for (const auto& problem :
       {check_credential_name(name), check_header(header), check_format(format)}) {
    if (!problem.empty()) return error(entry, problem);
  }
  auto rule = parse_http_rule(host);
  if (auto* e = std::get_if<RuleError>(&rule)) return error(entry, "host: " + e->what);
  auto& r = std::get<HttpRule>(rule);
  if (r.request) return error(entry, "host is HOST:PORT alone: no methods or path");
  return CredentialSpec{std::string(name), std::move(r), std::string(header), std::string(format)};
}

std::variant<CredentialSpec, RuleError> parse_credential(
    std::string_view text, std::vector<std::pair<std::string, std::string>>* extra) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos)
    return error(text, "expected NAME=HOST:PORT[,header=H][,format=F]");
  const auto name = text.substr(0, eq);
  auto rest = text.substr(eq + 1);
  const auto comma = rest.find(',');
  const auto host = rest.substr(0, comma);
  std::string_view header, format;
  bool have_header = false, have_format = false;
  rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  while (comma != std::string_view::npos) {
    const auto next = rest.find(',');
    const auto option = rest.substr(0, next);
    const auto oeq = option.find('=');
    const auto key = option.substr(0, oeq);
    const auto value = oeq == std::string_view::npos ? std::string_view{} : option.substr(oeq + 1);
    if (key == "header" && oeq != std::string_view::npos && !have_header) {
      header = value;
      have_header = true;
      if (value.empty()) return error(text, "empty header name");
    } else if (key == "format" && oeq != std::string_view::npos && !have_format) {
      format = value;
      have_format = true;
      if (value.empty()) return error(text, "empty format");
    } else if (key == "header" || key == "format") {
      return error(text, "option " + std::string(key) + " given twice, or without '='");
    } else if (extra != nullptr && !key.empty()) {
      extra->emplace_back(std::string(key), std::string(value));
    } else {
      return error(text, key.empty() ? std::string("empty option")
                                     : "unknown option \"" + std::string(key.substr(0, 32)) +
                                           "\" (header=H and format=F are known)");
    }
    if (next == std::string_view::npos) break;
    rest = rest.substr(next + 1);
  }
  auto made = make_credential(name, host, header, format);
  if (auto* e = std::get_if<RuleError>(&made)) e->entry = std::string(text);
  return made;
}

std::string secret_problem(std::string_view secret) {
  if (secret.empty()) return "the secret is empty";
  if (secret.size() > secret::SecretBytes::kMaxValue)
    return "the secret is longer than " + std::to_string(secret::SecretBytes::kMaxValue) + " bytes";
  for (char c : secret) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return "the secret holds a control character (such as a line end), which no header value may";
  }
  if (secret.front() == ' ' || secret.back() == ' ')
    return "the secret starts or ends with a space, which a header value would lose";
  return {};
}

std::shared_ptr<const secret::SecretBytes> header_value(const CredentialSpec& spec,
                                                        std::string_view value) {
  if (auto problem = secret_problem(value); !problem.empty()) throw std::invalid_argument(problem);
  std::shared_ptr<secret::SecretBytes> out;
  if (spec.format.starts_with(kBasic)) {
    const std::string_view user = std::string_view(spec.format).substr(kBasic.size());
    const std::string user_colon = std::string(user) + ":";
    const std::size_t n = base64_size(user_colon.size() + value.size());
    out = std::make_shared<secret::SecretBytes>(6 + n);
    out->append("Basic ");
    base64_of(user_colon, value, out->data() + out->size());
    out->resize(6 + n);
  } else {
    const auto at = spec.format.find("{}");
    const std::string_view f = spec.format;
    out = std::make_shared<secret::SecretBytes>(f.size() - 2 + value.size());
    out->append(f.substr(0, at));
    out->append(value);
    out->append(f.substr(at + 2));
  }
  return out;
}

bool same_header_same_host(const CredentialSpec& a, const CredentialSpec& b) {
  return a.host.text == b.host.text && iequals_ascii(a.header, b.header);
}

bool credential_matches(const CredentialSpec& spec, std::string_view key, std::uint16_t port) {
  const HttpRule& r = spec.host;
  if (!port_glob_matches(r.port_glob, port)) return false;
  if (r.kind == HttpRule::Kind::ip) return r.ip.to_string() == key;
  const std::string_view name = r.domain.name;
  if (!r.domain.wildcard) return key == name;
  return key.size() > name.size() + 1 && key.ends_with(name) &&
         key[key.size() - name.size() - 1] == '.';
}

}  // namespace vibepit::policy
