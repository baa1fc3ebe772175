#include "vibepit/control/credentials.hpp"

#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <memory>
#include <stdexcept>

#include "vibepit/tls/x509.hpp"

namespace vibepit::control {
namespace {

using tls::add_ext;
using tls::KeyType;
using tls::new_key;
using tls::PkeyPtr;
using tls::sign;
using tls::to_pem;
using tls::X509Ptr;

X509Ptr new_cert(EVP_PKEY* subject_key, const std::string& cn, const CredentialOptions& o) {
  return tls::new_cert(subject_key, cn, o.clock_skew, o.lifetime);
}

bool valid_ip_text(const std::string& ip) {
  unsigned char buf[16];
  return inet_pton(AF_INET, ip.c_str(), buf) == 1 || inet_pton(AF_INET6, ip.c_str(), buf) == 1;
}

std::string label(const CredentialOptions& o, const char* role) {
  return o.session_id.empty() ? std::string("vibepit ") + role
                              : "vibepit " + std::string(role) + " " + o.session_id;
}

}  // namespace

SessionAuthority::SessionAuthority(CredentialOptions opts) : opts_(std::move(opts)) {
  if (opts_.lifetime.count() <= 0) throw std::runtime_error("credentials: lifetime must be > 0");
  if (opts_.clock_skew.count() < 0) throw std::runtime_error("credentials: skew must be >= 0");
  for (const auto& ip : opts_.server_ips) {
    if (!valid_ip_text(ip)) throw std::runtime_error("credentials: not an IP address: " + ip);
  }
  auto key = new_key(KeyType::ed25519);
  auto cert = new_cert(key.get(), label(opts_, "session CA"), opts_);
  add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  sign(cert.get(), cert.get(), key.get());
  ca_cert_pem_ = to_pem(cert.get());
  ca_key_ = key.release();
  ca_cert_ = cert.release();
}

SessionAuthority::~SessionAuthority() {
  EVP_PKEY_free(static_cast<EVP_PKEY*>(ca_key_));
  X509_free(static_cast<X509*>(ca_cert_));
}

SessionCredentials SessionAuthority::issue() {
  if (!ca_key_) throw std::logic_error("credentials: the session CA key has been discarded");
  // Whatever happens below, the CA key does not outlive this call.
  PkeyPtr ca_key(static_cast<EVP_PKEY*>(ca_key_));
  ca_key_ = nullptr;
  auto* ca = static_cast<X509*>(ca_cert_);

  SessionCredentials out;
  out.ca_cert_pem = ca_cert_pem_;

  auto server_key = new_key(KeyType::ed25519);
  auto server = new_cert(server_key.get(), label(opts_, "control server"), opts_);
  std::string san = "IP:127.0.0.1";
  for (const auto& ip : opts_.server_ips) {
    if (ip != "127.0.0.1") san += ",IP:" + ip;
  }
  for (const auto& name : opts_.server_names) san += ",DNS:" + name;
  add_ext(server.get(), ca, NID_basic_constraints, "critical,CA:FALSE");
  add_ext(server.get(), ca, NID_key_usage, "critical,digitalSignature");
  add_ext(server.get(), ca, NID_ext_key_usage, "serverAuth");
  add_ext(server.get(), ca, NID_subject_alt_name, san);
  add_ext(server.get(), ca, NID_authority_key_identifier, "keyid:always");
  sign(server.get(), ca, ca_key.get());
  out.server = {to_pem(server.get()), to_pem(server_key.get())};

  auto client_key = new_key(KeyType::ed25519);
  auto client = new_cert(client_key.get(), label(opts_, "control client"), opts_);
  add_ext(client.get(), ca, NID_basic_constraints, "critical,CA:FALSE");
  add_ext(client.get(), ca, NID_key_usage, "critical,digitalSignature");
  add_ext(client.get(), ca, NID_ext_key_usage, "clientAuth");
  add_ext(client.get(), ca, NID_authority_key_identifier, "keyid:always");
  sign(client.get(), ca, ca_key.get());
  out.client = {to_pem(client.get()), to_pem(client_key.get())};
  return out;  // ca_key is freed here; OpenSSL clears Ed25519 key material on free
}

SessionCredentials issue_session_credentials(const CredentialOptions& opts) {
  return SessionAuthority(opts).issue();
}

}  // namespace vibepit::control
