#pragma once
// Certificates made and read in memory with OpenSSL, for the two CAs vibepit makes: the
// control API's session CA (control/credentials.hpp) and the inspection CA
// (inspection_ca.hpp). Every failure throws CertificateError with OpenSSL's own words.
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace vibepit::tls {

struct CertificateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <auto Fn>
struct Free {
  template <typename T>
  void operator()(T* p) const {
    Fn(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Free<X509_free>>;

// Throws CertificateError("certificate: <what>: <OpenSSL's first queued error>").
[[noreturn]] void fail(const std::string& what);

enum class KeyType { ed25519, p256 };
PkeyPtr new_key(KeyType type);

std::string to_pem(X509* cert);
std::string to_pem(EVP_PKEY* key);  // the private key: for keys that are handed over only
X509Ptr cert_from_pem(const std::string& pem);
PkeyPtr key_from_pem(const std::string& pem);

// A version 3 certificate for `subject_key` named O=vibepit, CN=`cn`, with a random
// 128-bit serial, valid from now - `skew` to now + `life`. Not signed yet.
X509Ptr new_cert(EVP_PKEY* subject_key, const std::string& cn, std::chrono::seconds skew,
                 std::chrono::seconds life);
// One extension in OpenSSL's configuration syntax ("critical,CA:TRUE"), with `issuer` for
// the authority key identifier.
void add_ext(X509* cert, X509* issuer, int nid, const std::string& value);
// Sets the issuer name and signs: SHA-256 for EC keys, no digest for Ed25519.
void sign(X509* cert, X509* issuer, EVP_PKEY* issuer_key);

// Facts read back from a PEM certificate, for tests, `vibepit status` and diagnostics.
struct CertificateInfo {
  std::string subject_cn;
  std::string serial_hex;
  std::size_t serial_bits = 0;
  bool is_ca = false;
  bool server_auth = false;  // extendedKeyUsage serverAuth
  bool client_auth = false;  // extendedKeyUsage clientAuth
  std::vector<std::string> san_ips;
  std::vector<std::string> san_names;
  std::chrono::system_clock::time_point not_before, not_after;
  std::string key_type;  // "ED25519", "EC", ...
};
CertificateInfo inspect_certificate(const std::string& cert_pem);
// True when `key_pem` is the private key of the certificate `cert_pem`.
bool key_matches_certificate(const std::string& key_pem, const std::string& cert_pem);
// True when `cert_pem` verifies against the single trust anchor `ca_pem` (and, when `host`
// is given, names it: a DNS name or an IP address).
bool verifies_against(const std::string& cert_pem, const std::string& ca_pem,
                      const std::string& host = {});

}  // namespace vibepit::tls
