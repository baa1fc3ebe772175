#include "vibepit/control/tls.hpp"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <stdexcept>

namespace vibepit::control {
namespace {

void common(asio::ssl::context& ctx, const PeerCredentials& creds) {
  SSL_CTX* native = ctx.native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(native, TLS1_3_VERSION) != 1) {
    throw std::runtime_error("tls: cannot restrict the context to TLS 1.3");
  }
  // No session tickets or resumption: every connection proves its certificate again. And
  // what a record decrypts to is wiped once read: a credential's value travels this way.
  SSL_CTX_set_options(native, SSL_OP_NO_TICKET | SSL_OP_CLEANSE_PLAINTEXT);
  SSL_CTX_set_session_cache_mode(native, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_num_tickets(native, 0);
  asio::error_code ec;
  // The session CA is the only trust anchor: no default paths are ever loaded.
  ctx.add_certificate_authority(asio::buffer(creds.ca_cert_pem), ec);
  if (ec) throw std::runtime_error("tls: the session CA does not load: " + ec.message());
  ctx.use_certificate_chain(asio::buffer(creds.own.cert_pem), ec);
  if (ec) throw std::runtime_error("tls: the certificate does not load: " + ec.message());
  ctx.use_private_key(asio::buffer(creds.own.key_pem), asio::ssl::context::pem, ec);
  if (ec) throw std::runtime_error("tls: the private key does not load: " + ec.message());
  if (SSL_CTX_check_private_key(native) != 1) {
    throw std::runtime_error("tls: the private key does not match the certificate");
  }
}

}  // namespace

asio::ssl::context make_server_tls(const PeerCredentials& server) {
  asio::ssl::context ctx(asio::ssl::context::tls_server);
  common(ctx, server);
  ctx.set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  // The peer's certificate must be made for client authentication: the server's own
  // certificate cannot stand in for the client's.
  SSL_CTX_set_purpose(ctx.native_handle(), X509_PURPOSE_SSL_CLIENT);
  return ctx;
}

asio::ssl::context make_client_tls(const PeerCredentials& client, const std::string& server_ip) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  common(ctx, client);
  ctx.set_verify_mode(asio::ssl::verify_peer);
  SSL_CTX_set_purpose(ctx.native_handle(), X509_PURPOSE_SSL_SERVER);
  X509_VERIFY_PARAM* param = SSL_CTX_get0_param(ctx.native_handle());
  if (X509_VERIFY_PARAM_set1_ip_asc(param, server_ip.c_str()) != 1) {
    throw std::runtime_error("tls: not an IP address: " + server_ip);
  }
  return ctx;
}

}  // namespace vibepit::control
