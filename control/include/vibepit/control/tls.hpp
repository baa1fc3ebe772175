#pragma once
// TLS 1.3-only contexts for the control API. The server demands a client certificate and
// verifies it against the session CA alone; the client trusts only the session CA (it pins
// it) and checks the server certificate's IP address.
#include <string>

#include <asio/ssl/context.hpp>

#include "vibepit/control/credentials.hpp"

namespace vibepit::control {

// Throws std::runtime_error when the PEM material does not load.
asio::ssl::context make_server_tls(const PeerCredentials& server);
// `server_ip`: the address the client dials; the server certificate must name it.
asio::ssl::context make_client_tls(const PeerCredentials& client, const std::string& server_ip);

}  // namespace vibepit::control
