#include "vibepit/proxy/inspection.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>

#include <stdexcept>

namespace vibepit::proxy {
namespace {

// ALPN: the one protocol the proxy reads (a length-prefixed list).
constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// The client's list holds http/1.1: it is chosen. It does not (h2 only): no protocol is
// agreed, and the client decides whether HTTP/1.1 will do.
int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                  unsigned int inlen, void*) {
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, outlen, kHttp11, sizeof kHttp11, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

bool is_ip(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// Both sides: TLS 1.2 or later, no renegotiation (a TLS 1.2 peer's would cost a handshake
// at its will, and hide a second ClientHello from the SNI check), and OpenSSL's record
// buffers (34 KiB a connection) given back while a connection is idle.
void common(asio::ssl::context& ctx) {
  if (SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION) != 1) {
    throw std::runtime_error("inspection: " + take_ssl_error("cannot require TLS 1.2"));
  }
  SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx.native_handle(), SSL_MODE_RELEASE_BUFFERS);
}

}  // namespace

std::string take_ssl_error(std::string_view fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return std::string(fallback);
  const char* reason = ERR_reason_error_string(e);
  return reason != nullptr ? reason : std::string(fallback);
}

Inspection::Inspection(tls::InspectionCa& ca, const std::string& upstream_ca_file)
    : ca_(ca),
      client_side_(asio::ssl::context::tls_server),
      upstream_side_(asio::ssl::context::tls_client) {
  common(client_side_);
  SSL_CTX* server = client_side_.native_handle();
  // Every leaf certifies this one key: it is set once, and each connection sets its leaf.
  if (SSL_CTX_use_PrivateKey(server, ca_.leaf_key()) != 1) {
    throw std::runtime_error("inspection: " + take_ssl_error("the leaf key does not load"));
  }
  SSL_CTX_set_alpn_select_cb(server, select_http11, nullptr);

  common(upstream_side_);
  SSL_CTX* client = upstream_side_.native_handle();
  asio::error_code ec;
  upstream_side_.set_default_verify_paths(ec);
  if (ec) throw std::runtime_error("inspection: the system trust store: " + ec.message());
  if (!upstream_ca_file.empty()) {
    upstream_side_.load_verify_file(upstream_ca_file, ec);
    if (ec) {
      throw std::runtime_error("upstream-ca-file \"" + upstream_ca_file +
                               "\" does not load: " + take_ssl_error(ec.message()));
    }
  }
  upstream_side_.set_verify_mode(asio::ssl::verify_peer);
  SSL_CTX_set_purpose(client, X509_PURPOSE_SSL_SERVER);
  if (SSL_CTX_set_alpn_protos(client, kHttp11, sizeof kHttp11) != 0) {  // 0 is success
    throw std::runtime_error("inspection: cannot offer ALPN http/1.1");
  }
}

void Inspection::present(SSL* ssl, std::string_view host) {
  const auto leaf = ca_.leaf(host);
  // Both take their own references: the leaf may leave the cache while this connection
  // lives.
  if (SSL_use_certificate(ssl, leaf->cert.get()) != 1 ||
      SSL_add1_chain_cert(ssl, ca_.cert()) != 1) {
    throw tls::CertificateError("inspection: " + take_ssl_error("the leaf does not load"));
  }
}

void Inspection::expect(SSL* ssl, const std::string& host) {
  bool ok;
  if (is_ip(host)) {
    ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host.c_str()) == 1;
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    ok = SSL_set_tlsext_host_name(ssl, host.c_str()) == 1 && SSL_set1_host(ssl, host.c_str()) == 1;
  }
  if (!ok) throw std::runtime_error("inspection: " + take_ssl_error("cannot expect " + host));
}

std::string Inspection::verify_failure(const SSL* ssl) {
  const long result = SSL_get_verify_result(ssl);
  if (result == X509_V_OK) return {};
  return X509_verify_cert_error_string(result);
}

}  // namespace vibepit::proxy
