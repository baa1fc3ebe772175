#include "vibepit/tls/inspection_ca.hpp"

#include <openssl/x509v3.h>

#include <arpa/inet.h>

namespace vibepit::tls {
namespace {

bool is_ip(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A host a certificate may name: letters, digits, '-', '.', '_' (or an IP address), so that
// no configuration syntax reaches OpenSSL's extension parser.
bool nameable(const std::string& host) {
  if (host.empty() || host.size() > 253) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                    c == '_' || c == ':';
    if (!ok) return false;
  }
  return host.find(':') == std::string::npos || is_ip(host);
}

}  // namespace

InspectionCa::InspectionCa(Options opts) : opts_(std::move(opts)) {
  if (opts_.lifetime.count() <= 0) throw CertificateError("inspection CA: lifetime must be > 0");
  if (opts_.max_leaves == 0) throw CertificateError("inspection CA: max_leaves must be > 0");
  key_ = new_key(KeyType::p256);
  leaf_key_ = new_key(KeyType::p256);
  const std::string cn =
      "vibepit inspection CA" + (opts_.session_id.empty() ? std::string() : " " + opts_.session_id);
  cert_ = new_cert(key_.get(), cn, opts_.clock_skew, opts_.lifetime);
  add_ext(cert_.get(), cert_.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
  add_ext(cert_.get(), cert_.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  add_ext(cert_.get(), cert_.get(), NID_subject_key_identifier, "hash");
  sign(cert_.get(), cert_.get(), key_.get());
  cert_pem_ = to_pem(cert_.get());
  not_after_ = inspect_certificate(cert_pem_).not_after;
}

std::shared_ptr<const Leaf> InspectionCa::issue(const std::string& host) const {
  if (!nameable(host)) throw CertificateError("inspection CA: not a host name: " + host);
  auto leaf = std::make_shared<Leaf>();
  leaf->host = host;
  leaf->key = leaf_key_.get();
  // It ends when the CA does: what is left of the CA's life, never more.
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(
      not_after_ - std::chrono::system_clock::now());
  leaf->cert = new_cert(leaf->key, host, opts_.clock_skew, std::max(left, std::chrono::seconds(1)));
  X509* cert = leaf->cert.get();
  add_ext(cert, cert_.get(), NID_basic_constraints, "critical,CA:FALSE");
  add_ext(cert, cert_.get(), NID_key_usage, "critical,digitalSignature");
  add_ext(cert, cert_.get(), NID_ext_key_usage, "serverAuth");
  add_ext(cert, cert_.get(), NID_subject_alt_name, (is_ip(host) ? "IP:" : "DNS:") + host);
  add_ext(cert, cert_.get(), NID_authority_key_identifier, "keyid:always");
  sign(cert, cert_.get(), key_.get());
  leaf->cert_pem = to_pem(cert);
  return leaf;
}

std::shared_ptr<const Leaf> InspectionCa::leaf(std::string_view host_view) {
  const std::string host(host_view);
  {
    std::lock_guard lock(mu_);
    if (auto it = by_host_.find(host); it != by_host_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second);
      ++stats_.reused;
      return *it->second;
    }
  }
  // Issued outside the lock (a signature takes tens of microseconds); two threads asking for
  // one new host at once each make one, and the first to come back is kept.
  auto made = issue(host);
  std::lock_guard lock(mu_);
  ++stats_.issued;
  if (auto it = by_host_.find(host); it != by_host_.end()) return *it->second;
  recent_.push_front(made);
  by_host_[host] = recent_.begin();
  if (recent_.size() > opts_.max_leaves) {
    by_host_.erase(recent_.back()->host);
    recent_.pop_back();
  }
  return made;
}

InspectionCa::Stats InspectionCa::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.cached = recent_.size();
  return s;
}

}  // namespace vibepit::tls
