#include "vibepit/proxy/response.hpp"

#include <gtest/gtest.h>

namespace vibepit::proxy {
namespace {

TEST(ProxyStatus, NamesTheErrorTypeAndTheReason) {
  EXPECT_EQ(proxy_status_value(ProxyError::http_request_denied,
                               "access to a.example:443 denied: not allowlisted.\nTo allow it, "
                               "run: vibepit allow-http a.example:443"),
            "vibepit; error=http_request_denied; details=\"access to a.example:443 denied: not "
            "allowlisted. To allow it, run: vibepit allow-http a.example:443\"");
}

TEST(ProxyStatus, DetailsAreAValidStructuredFieldString) {
  // RFC 8941 sf-string: printable ASCII, with " and \ escaped; nothing that could end the
  // header line or start another.
  auto v = proxy_status_value(ProxyError::http_request_error,
                              "  bad \"target\" a\\b\r\nInjected: yes\x01\x7f\xc3\xa9\t end  ");
  EXPECT_EQ(v,
            "vibepit; error=http_request_error; details=\"bad \\\"target\\\" a\\\\b Injected: yes "
            "end\"");
}

TEST(ProxyStatus, DetailsAreBounded) {
  auto v = proxy_status_value(ProxyError::dns_error, std::string(10'000, 'x'));
  EXPECT_LT(v.size(), 600u);
}

TEST(ProxyStatus, EveryErrorHasItsRfc9209Token) {
  struct Row {
    ProxyError error;
    const char* token;
  };
  const Row rows[] = {
      {ProxyError::http_request_error, "http_request_error"},
      {ProxyError::http_request_denied, "http_request_denied"},
      {ProxyError::destination_ip_prohibited, "destination_ip_prohibited"},
      {ProxyError::dns_error, "dns_error"},
      {ProxyError::dns_timeout, "dns_timeout"},
      {ProxyError::connection_refused, "connection_refused"},
      {ProxyError::destination_ip_unroutable, "destination_ip_unroutable"},
      {ProxyError::destination_unavailable, "destination_unavailable"},
      {ProxyError::connection_timeout, "connection_timeout"},
      {ProxyError::connection_terminated, "connection_terminated"},
      {ProxyError::http_response_incomplete, "http_response_incomplete"},
      {ProxyError::proxy_internal_error, "proxy_internal_error"},
  };
  for (const auto& r : rows) EXPECT_EQ(error_token(r.error), r.token);
}

TEST(ErrorResponse, CarriesProxyStatusAndTheSameTextInTheBody) {
  auto text = make_error_response(403, ProxyError::destination_ip_prohibited,
                                  "the address is in the blocked range 10.0.0.0/8", true);
  EXPECT_EQ(text.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << text;
  EXPECT_NE(text.find("\r\nProxy-Status: vibepit; error=destination_ip_prohibited; "
                      "details=\"the address is in the blocked range 10.0.0.0/8\"\r\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\r\n\r\nvibepit: the address is in the blocked range 10.0.0.0/8\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Connection: close\r\n"), std::string::npos);
}

}  // namespace
}  // namespace vibepit::proxy
