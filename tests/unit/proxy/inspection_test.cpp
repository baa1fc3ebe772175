// TLS inspection's two sides, over real TCP on 127.0.0.1: to a client, the leaf for the
// host it asked for, chained to the inspection CA, with ALPN http/1.1; to an upstream, a
// client that verifies the certificate and the name against the machine's store plus
// upstream-ca-file, and says why it refused.
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/redirect_error.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/use_awaitable.hpp>

#include "vibepit/proxy/inspection.hpp"

namespace vibepit::proxy {
namespace {

using asio::ip::tcp;
using Stream = asio::ssl::stream<tcp::socket&>;

struct Outcome {
  asio::error_code server, client;
  std::string alpn;    // what the client agreed on
  int chain_len = 0;   // certificates the client was sent
  std::string verify;  // the client's verification failure, as Inspection says it
};

// One handshake between a server (set up by `serve` on its SSL) and a client (by
// `dial`), each on its own side of a loopback connection.
template <typename Serve, typename Dial>
Outcome handshake(asio::ssl::context& server_ctx, Serve serve, asio::ssl::context& client_ctx,
                  Dial dial) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket server_sock(io), client_sock(io);
  Stream server(server_sock, server_ctx), client(client_sock, client_ctx);
  Outcome out;
  serve(server.native_handle());
  dial(client.native_handle());
  auto tok = [](asio::error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); };
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await acceptor.async_accept(server_sock, tok(out.server));
        if (!out.server) co_await server.async_handshake(Stream::server, tok(out.server));
        if (out.server) server_sock.close();  // the client's handshake ends too
      },
      asio::detached);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        co_await client_sock.async_connect(acceptor.local_endpoint(), tok(out.client));
        if (!out.client) co_await client.async_handshake(Stream::client, tok(out.client));
        out.verify = Inspection::verify_failure(client.native_handle());
        if (out.client) {
          client_sock.close();
          co_return;
        }
        const unsigned char* p = nullptr;
        unsigned int n = 0;
        SSL_get0_alpn_selected(client.native_handle(), &p, &n);
        out.alpn.assign(reinterpret_cast<const char*>(p), n);
        if (STACK_OF(X509)* chain = SSL_get_peer_cert_chain(client.native_handle())) {
          out.chain_len = sk_X509_num(chain);
        }
      },
      asio::detached);
  io.run_for(std::chrono::seconds(10));
  return out;
}

// A client that trusts only `ca_pem` and wants `host` (and the ALPN list `alpn`).
asio::ssl::context trusting(const std::string& ca_pem) {
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.add_certificate_authority(asio::buffer(ca_pem));
  ctx.set_verify_mode(asio::ssl::verify_peer);
  return ctx;
}

auto wanting(const std::string& host, std::string alpn = std::string("\x08http/1.1", 9)) {
  return [host, alpn](SSL* ssl) {
    SSL_set_tlsext_host_name(ssl, host.c_str());
    SSL_set1_host(ssl, host.c_str());
    SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(alpn.data()),
                        static_cast<unsigned int>(alpn.size()));
  };
}

class InspectionTest : public ::testing::Test {
 protected:
  tls::InspectionCa ca_{{.session_id = "test"}};
  Inspection insp_{ca_, ""};
  // Another CA, standing for an upstream's own: nobody trusts it unless told to.
  tls::InspectionCa other_ca_{{.session_id = "upstream"}};
  Inspection other_{other_ca_, ""};

  auto presenting(Inspection& as, const std::string& host) {
    return [&as, host](SSL* ssl) { as.present(ssl, host); };
  }
};

TEST_F(InspectionTest, TheClientGetsTheHostsLeafChainedToTheCaAndHttp11) {
  auto client = trusting(ca_.cert_pem());
  const std::string both("\x02h2\x08http/1.1", 12);
  auto got = handshake(insp_.client_side(), presenting(insp_, "api.example.test"), client,
                       wanting("api.example.test", both));
  EXPECT_FALSE(got.server) << got.server.message();
  EXPECT_FALSE(got.client) << got.client.message();
  EXPECT_EQ(got.verify, "");
  EXPECT_EQ(got.alpn, "http/1.1");
  EXPECT_EQ(got.chain_len, 2);  // the leaf, then the CA
}

TEST_F(InspectionTest, AnIpAddressHostGetsALeafNamingTheAddress) {
  auto client = trusting(ca_.cert_pem());
  auto got =
      handshake(insp_.client_side(), presenting(insp_, "198.51.100.7"), client, [](SSL* ssl) {
        ASSERT_EQ(X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "198.51.100.7"), 1);
      });
  EXPECT_FALSE(got.client) << got.client.message();
}

TEST_F(InspectionTest, AClientOfferingOnlyH2AgreesOnNoProtocol) {
  auto client = trusting(ca_.cert_pem());
  auto got = handshake(insp_.client_side(), presenting(insp_, "api.example.test"), client,
                       wanting("api.example.test", std::string("\x02h2", 3)));
  EXPECT_FALSE(got.client) << got.client.message();
  EXPECT_EQ(got.alpn, "");
}

TEST_F(InspectionTest, TheLeafIsRefusedForAnotherName) {
  auto client = trusting(ca_.cert_pem());
  auto got = handshake(insp_.client_side(), presenting(insp_, "api.example.test"), client,
                       wanting("other.example.test"));
  EXPECT_TRUE(got.client);
  EXPECT_NE(got.verify.find("mismatch"), std::string::npos) << got.verify;
}

TEST_F(InspectionTest, AnUpstreamNoTrustedCaSignedIsRefusedWithTheReason) {
  auto got =
      handshake(other_.client_side(), presenting(other_, "upstream.test"), insp_.upstream_side(),
                [](SSL* ssl) { Inspection::expect(ssl, "upstream.test"); });
  EXPECT_TRUE(got.client);
  // It sends its CA after its leaf: a root nobody here trusts.
  EXPECT_EQ(got.verify, "self-signed certificate in certificate chain");
}

TEST_F(InspectionTest, UpstreamCaFileIsTrustedAndTheNameStillChecked) {
  const std::string path = ::testing::TempDir() + "/vibepit-upstream-ca.pem";
  std::ofstream(path) << other_ca_.cert_pem();
  Inspection corp(ca_, path);
  auto good =
      handshake(other_.client_side(), presenting(other_, "upstream.test"), corp.upstream_side(),
                [](SSL* ssl) { Inspection::expect(ssl, "upstream.test"); });
  EXPECT_FALSE(good.client) << good.client.message();
  EXPECT_EQ(good.alpn, "http/1.1");
  auto wrong =
      handshake(other_.client_side(), presenting(other_, "upstream.test"), corp.upstream_side(),
                [](SSL* ssl) { Inspection::expect(ssl, "elsewhere.test"); });
  EXPECT_TRUE(wrong.client);
  EXPECT_NE(wrong.verify.find("mismatch"), std::string::npos) << wrong.verify;
  std::remove(path.c_str());
}

TEST_F(InspectionTest, AnUpstreamCaFileThatDoesNotLoadIsAnError) {
  try {
    Inspection bad(ca_, "/nonexistent/vibepit-ca.pem");
    FAIL() << "a missing upstream-ca-file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/vibepit-ca.pem"), std::string::npos)
        << e.what();
  }
}

TEST_F(InspectionTest, AHostThatIsNoNameGetsNoLeaf) {
  asio::io_context io;
  tcp::socket sock(io);
  Stream s(sock, insp_.client_side());
  EXPECT_THROW(insp_.present(s.native_handle(), "bad name\r\nx"), tls::CertificateError);
}

}  // namespace
}  // namespace vibepit::proxy
