#include "vibepit/control/credentials.hpp"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <ctime>
#include <memory>
#include <stdexcept>

namespace vibepit::control {
namespace {

template <auto Fn>
struct Free {
  template <typename T>
  void operator()(T* p) const {
    Fn(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Free<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Free<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Free<BIO_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Free<BN_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Free<X509_STORE_CTX_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Free<X509_STORE_free>>;

[[noreturn]] void fail(const std::string& what) {
  unsigned long code = ERR_get_error();
  std::string detail;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    detail = std::string(": ") + buf;
  }
  ERR_clear_error();
  throw std::runtime_error("credentials: " + what + detail);
}

PkeyPtr new_ed25519_key() {
  PkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) fail("Ed25519 key generation failed");
  return key;
}

std::string to_pem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) fail("PEM encoding failed");
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(len));
}

std::string to_pem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    fail("PEM encoding failed");
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(len));
}

X509Ptr cert_from_pem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!cert) fail("not a PEM certificate");
  return cert;
}

PkeyPtr key_from_pem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!key) fail("not a PEM private key");
  return key;
}

// 128 random bits, as a positive serial (RFC 5280 allows up to 20 octets).
void set_random_serial(X509* cert) {
  unsigned char bytes[16];
  do {
    if (RAND_bytes(bytes, sizeof bytes) != 1) fail("no randomness for the serial");
  } while (bytes[0] == 0);  // keep all 128 bits significant
  BnPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert))) fail("serial");
}

void add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) fail("extension " + std::string(OBJ_nid2sn(nid)) + "=" + value);
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) fail("adding extension " + std::string(OBJ_nid2sn(nid)));
}

X509Ptr new_cert(EVP_PKEY* subject_key, const std::string& cn, const CredentialOptions& o) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) fail("X509_new");
  set_random_serial(cert.get());
  auto skew = static_cast<long>(o.clock_skew.count());
  auto life = static_cast<long>(o.lifetime.count());
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -skew) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), life)) {
    fail("validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>("vibepit"), -1, -1,
                                 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1) {
    fail("subject name");
  }
  if (X509_set_pubkey(cert.get(), subject_key) != 1) fail("public key");
  return cert;
}

void sign(X509* cert, X509* issuer, EVP_PKEY* issuer_key) {
  if (X509_set_issuer_name(cert, X509_get_subject_name(issuer)) != 1) fail("issuer name");
  if (X509_sign(cert, issuer_key, nullptr) <= 0) fail("signing");  // Ed25519: no digest
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
  auto key = new_ed25519_key();
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

  auto server_key = new_ed25519_key();
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

  auto client_key = new_ed25519_key();
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

CertificateInfo inspect_certificate(const std::string& cert_pem) {
  auto cert = cert_from_pem(cert_pem);
  CertificateInfo info;
  char cn[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn) >
      0) {
    info.subject_cn = cn;
  }
  BnPtr serial(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert.get()), nullptr));
  if (serial) {
    char* hex = BN_bn2hex(serial.get());
    info.serial_hex = hex ? hex : "";
    OPENSSL_free(hex);
    info.serial_bits = static_cast<std::size_t>(BN_num_bits(serial.get()));
  }
  info.is_ca = X509_check_ca(cert.get()) > 0;
  std::uint32_t xku = X509_get_extended_key_usage(cert.get());
  bool has_eku = (X509_get_extension_flags(cert.get()) & EXFLAG_XKUSAGE) != 0;
  info.server_auth = has_eku && (xku & XKU_SSL_SERVER);
  info.client_auth = has_eku && (xku & XKU_SSL_CLIENT);
  auto* sans = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  if (sans) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* gn = sk_GENERAL_NAME_value(sans, i);
      if (gn->type != GEN_IPADD) continue;
      char text[INET6_ADDRSTRLEN] = {0};
      const ASN1_OCTET_STRING* ip = gn->d.iPAddress;
      int af = ip->length == 4 ? AF_INET : ip->length == 16 ? AF_INET6 : 0;
      if (af && inet_ntop(af, ip->data, text, sizeof text)) info.san_ips.emplace_back(text);
    }
    GENERAL_NAMES_free(sans);
  }
  auto to_time = [](const ASN1_TIME* t) {
    std::tm tm{};
    ASN1_TIME_to_tm(t, &tm);
    return std::chrono::system_clock::from_time_t(timegm(&tm));
  };
  info.not_before = to_time(X509_get0_notBefore(cert.get()));
  info.not_after = to_time(X509_get0_notAfter(cert.get()));
  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  if (pub) info.key_type = EVP_PKEY_get0_type_name(pub) ? EVP_PKEY_get0_type_name(pub) : "";
  return info;
}

bool key_matches_certificate(const std::string& key_pem, const std::string& cert_pem) {
  auto cert = cert_from_pem(cert_pem);
  auto key = key_from_pem(key_pem);
  bool ok = X509_check_private_key(cert.get(), key.get()) == 1;
  ERR_clear_error();
  return ok;
}

bool verifies_against(const std::string& cert_pem, const std::string& ca_pem) {
  auto cert = cert_from_pem(cert_pem);
  auto ca = cert_from_pem(ca_pem);
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    fail("verification setup");
  }
  bool ok = X509_verify_cert(ctx.get()) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace vibepit::control
