// Certificates in memory with OpenSSL: keys, PEM, building and signing, reading back.
#include "vibepit/tls/x509.hpp"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <ctime>

namespace vibepit::tls {
namespace {

using BioPtr = std::unique_ptr<BIO, Free<BIO_free>>;
using BnPtr = std::unique_ptr<BIGNUM, Free<BN_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Free<X509_STORE_CTX_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Free<X509_STORE_free>>;

// 128 random bits, as a positive serial (RFC 5280 allows up to 20 octets).
void set_random_serial(X509* cert) {
  unsigned char bytes[16];
  do {
    if (RAND_bytes(bytes, sizeof bytes) != 1) fail("no randomness for the serial");
  } while (bytes[0] == 0);  // keep all 128 bits significant
  BnPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert))) fail("serial");
}

}  // namespace

void fail(const std::string& what) {
  unsigned long code = ERR_get_error();
  std::string detail;
  if (code != 0) {
    char buf[256];
    ERR_error_string_n(code, buf, sizeof buf);
    detail = std::string(": ") + buf;
  }
  ERR_clear_error();
  throw CertificateError("certificate: " + what + detail);
}

PkeyPtr new_key(KeyType type) {
  PkeyPtr key(type == KeyType::ed25519 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")
                                       : EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key)
    fail(type == KeyType::ed25519 ? "Ed25519 key generation failed"
                                  : "P-256 key generation failed");
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

X509Ptr new_cert(EVP_PKEY* subject_key, const std::string& cn, std::chrono::seconds skew,
                 std::chrono::seconds life) {
  X509Ptr cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) fail("X509_new");
  set_random_serial(cert.get());
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -static_cast<long>(skew.count())) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(life.count()))) {
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
  const bool ed25519 = EVP_PKEY_get_id(issuer_key) == EVP_PKEY_ED25519;
  if (X509_sign(cert, issuer_key, ed25519 ? nullptr : EVP_sha256()) <= 0) fail("signing");
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
      if (gn->type == GEN_DNS) {
        const auto* s = gn->d.dNSName;
        info.san_names.emplace_back(reinterpret_cast<const char*>(s->data),
                                    static_cast<std::size_t>(s->length));
        continue;
      }
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

bool verifies_against(const std::string& cert_pem, const std::string& ca_pem,
                      const std::string& host) {
  auto cert = cert_from_pem(cert_pem);
  auto ca = cert_from_pem(ca_pem);
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    fail("verification setup");
  }
  if (!host.empty()) {
    X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
    unsigned char ip[16];
    const bool is_ip =
        inet_pton(AF_INET, host.c_str(), ip) == 1 || inet_pton(AF_INET6, host.c_str(), ip) == 1;
    if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
               : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size())) != 1) {
      fail("verification host");
    }
  }
  bool ok = X509_verify_cert(ctx.get()) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace vibepit::tls
