#pragma once
// TLS inspection's two sides (docs/security.md "Inspection"). To the client, the proxy is
// the host it asked for: a leaf certificate from the inspection CA, issued for that host on
// first use, and ALPN http/1.1 only (the requests are read as HTTP/1.1). To the upstream,
// the proxy is a verifying client: the machine's trust store plus upstream-ca-file, the
// certificate must name the host, TLS 1.2 or later. One Inspection serves every worker:
// its contexts only make connections, which OpenSSL allows from any thread.
#include <memory>
#include <string>
#include <string_view>

#include <asio/ssl/context.hpp>

#include "vibepit/tls/inspection_ca.hpp"

namespace vibepit::proxy {

class Inspection {
 public:
  // Throws std::runtime_error when upstream-ca-file (empty: none) does not load or the
  // machine's trust store cannot be found.
  Inspection(tls::InspectionCa& ca, const std::string& upstream_ca_file);
  Inspection(const Inspection&) = delete;
  Inspection& operator=(const Inspection&) = delete;

  tls::InspectionCa& ca() { return ca_; }
  asio::ssl::context& client_side() { return client_side_; }
  asio::ssl::context& upstream_side() { return upstream_side_; }

  // A connection to the client, made from client_side(): it presents `host`'s leaf (and
  // the CA after it). Throws tls::CertificateError when no leaf can be made for `host`.
  void present(SSL* ssl, std::string_view host);
  // A connection to the upstream, made from upstream_side(): SNI `host` (not for an IP
  // address), and the certificate must name `host`.
  static void expect(SSL* ssl, const std::string& host);
  // Why the upstream's certificate was refused ("self-signed certificate", "Hostname
  // mismatch", ...), or empty when verification did not fail.
  static std::string verify_failure(const SSL* ssl);

 private:
  tls::InspectionCa& ca_;
  asio::ssl::context client_side_;
  asio::ssl::context upstream_side_;
};

// OpenSSL's first queued error as text, and the queue cleared; `fallback` when none is.
std::string take_ssl_error(std::string_view fallback);

}  // namespace vibepit::proxy
