#pragma once
// Per-session mTLS credentials, made in memory: an ephemeral Ed25519 CA signs one server
// and one client certificate and its private key is then destroyed, so nothing can mint
// another certificate for the session. Both sides trust only that CA.
#include <chrono>
#include <string>
#include <vector>

#include "vibepit/tls/x509.hpp"

namespace vibepit::control {

struct CredentialOptions {
  std::string session_id;                 // goes into the subjects' common names
  std::vector<std::string> server_ips;    // SAN IPs besides 127.0.0.1 (IPv4 or IPv6 text)
  std::vector<std::string> server_names;  // SAN DNS names, if any
  std::chrono::seconds lifetime{std::chrono::hours(24 * 7)};
  std::chrono::seconds clock_skew{std::chrono::minutes(5)};  // NotBefore = now - skew
};

// A certificate and its private key, PEM encoded.
struct KeyPair {
  std::string cert_pem;
  std::string key_pem;
};

// What one side of the control connection holds: its own pair and the CA it pins.
struct PeerCredentials {
  std::string ca_cert_pem;
  KeyPair own;
};

struct SessionCredentials {
  std::string ca_cert_pem;
  KeyPair server;
  KeyPair client;
  PeerCredentials server_side() const { return {ca_cert_pem, server}; }
  PeerCredentials client_side() const { return {ca_cert_pem, client}; }
};

// The session CA. It signs exactly once: issue() makes both certificates and destroys
// the CA key before it returns, so holds_key() is false from then on.
class SessionAuthority {
 public:
  explicit SessionAuthority(CredentialOptions opts);  // generates the CA key and certificate
  ~SessionAuthority();
  SessionAuthority(const SessionAuthority&) = delete;
  SessionAuthority& operator=(const SessionAuthority&) = delete;

  // Sign the server and the client certificate, then discard the CA key.
  // Throws std::logic_error when called a second time, std::runtime_error on an OpenSSL
  // failure or an invalid server address.
  SessionCredentials issue();
  bool holds_key() const { return ca_key_ != nullptr; }
  const std::string& ca_cert_pem() const { return ca_cert_pem_; }

 private:
  CredentialOptions opts_;
  void* ca_key_ = nullptr;   // EVP_PKEY*, freed (and zeroed by OpenSSL) by issue()
  void* ca_cert_ = nullptr;  // X509*
  std::string ca_cert_pem_;
};

// SessionAuthority(opts).issue(): the usual way to make a session's credentials.
SessionCredentials issue_session_credentials(const CredentialOptions& opts);

// Reading certificates back (tests, diagnostics): tls/x509.hpp.
using tls::CertificateInfo;
using tls::inspect_certificate;
using tls::key_matches_certificate;
using tls::verifies_against;

}  // namespace vibepit::control
