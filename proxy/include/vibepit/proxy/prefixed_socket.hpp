#pragma once
// A client socket whose first reads are served from bytes already read from it: the
// ClientHello that the SNI check read and judged before the TLS engine takes the socket.
// A stream for asio::ssl::stream: reads drain `prefix` first (each completes at once,
// posted, never inline), then go to the socket; writes go to the socket.
#include <cstddef>
#include <utility>

#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/error_code.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>

#include "vibepit/proxy/byte_buffer.hpp"

namespace vibepit::proxy {

class PrefixedSocket {
 public:
  using executor_type = asio::ip::tcp::socket::executor_type;
  using lowest_layer_type = asio::ip::tcp::socket::lowest_layer_type;

  // Both must outlive this stream.
  PrefixedSocket(asio::ip::tcp::socket& socket, ByteBuffer& prefix)
      : socket_(&socket), prefix_(&prefix) {}

  executor_type get_executor() { return socket_->get_executor(); }
  lowest_layer_type& lowest_layer() { return socket_->lowest_layer(); }
  const lowest_layer_type& lowest_layer() const { return socket_->lowest_layer(); }

  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return asio::async_initiate<Token, void(asio::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& to) {
          if (prefix_->empty()) {
            socket_->async_read_some(to, std::move(handler));
            return;
          }
          const std::size_t n =
              asio::buffer_copy(to, asio::buffer(prefix_->data(), prefix_->size()));
          prefix_->consume(n);
          asio::post(socket_->get_executor(), [h = std::move(handler), n]() mutable {
            std::move(h)(asio::error_code(), n);
          });
        },
        token, buffers);
  }

  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return socket_->async_write_some(buffers, std::forward<Token>(token));
  }

 private:
  asio::ip::tcp::socket* socket_;
  ByteBuffer* prefix_;
};

}  // namespace vibepit::proxy
