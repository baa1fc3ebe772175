#include "ca_bundles.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "vibepit/launcher/session/session.hpp"
#include "vibepit/tls/x509.hpp"

namespace vibepit::launcher {
namespace fs = std::filesystem;

namespace {

// A bundle holds certificates and nothing else a tool could read as more.
constexpr std::size_t kMaxBundle = 4u << 20;

std::string read_small(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (s.size() > kMaxBundle) throw std::runtime_error(p.string() + " is larger than 4 MiB");
  return s;
}

// Written beside `p` and renamed over it: a mount of `p` made later sees it whole.
void replace_file(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    o << text;
    o.close();
    if (!o) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::permissions(tmp, fs::perms(0644));
  fs::rename(tmp, p);
}

std::string with_newline(std::string s) {
  if (!s.empty() && s.back() != '\n') s += '\n';
  return s;
}

}  // namespace

std::string system_cas() {
  for (const char* p : {"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt",
                        "/etc/ssl/cert.pem"}) {
    if (auto s = read_small(p); !s.empty()) return with_newline(std::move(s));
  }
  return {};
}

std::vector<std::string> ca_bundle_env(const std::string& bundle) {
  std::vector<std::string> out;
  for (const char* name : {"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE",
                           "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT"}) {
    out.push_back(std::string(name) + "=" + bundle);
  }
  return out;
}

void Session::prepare_ca_bundles() {
  system_cas_ = system_cas();
  std::string upstream = system_cas_;
  if (!spec_.upstream_ca.empty()) {
    const std::string extra = read_small(spec_.upstream_ca);
    if (extra.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
      throw std::runtime_error("--upstream-ca " + spec_.upstream_ca.string() +
                               ": no PEM certificate in it");
    upstream += with_newline(extra);
  }
  replace_file(spec_.dir / kUpstreamCaFile, upstream);
  // The sandbox's mount needs its file when the sandbox is made: the host's CAs for now.
  replace_file(spec_.dir / kSandboxCaFile, system_cas_);
}

void Session::complete_sandbox_bundle() {
  const fs::path written = spec_.dir / "control" / kInspectCaName;
  const std::string pem = read_small(written);
  // The proxy's word, checked: one certificate, a CA.
  tls::CertificateInfo info;
  try {
    info = tls::inspect_certificate(pem);
  } catch (const tls::CertificateError& e) {
    throw std::runtime_error("the proxy's inspection CA (" + written.string() +
                             ") does not read: " + e.what());
  }
  if (!info.is_ca) throw std::runtime_error("the proxy's inspection CA is not a CA certificate");
  replace_file(spec_.dir / kSandboxCaFile, system_cas_ + with_newline(pem));
}

}  // namespace vibepit::launcher
