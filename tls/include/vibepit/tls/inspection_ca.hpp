#pragma once
// The inspection CA (docs/security.md, invariant 9): made in memory when the proxy starts,
// an ECDSA P-256 key that lives only in this object (never written, never logged, freed
// with it) and a certificate valid for the session's life and no longer. It issues a leaf
// certificate for each host the proxy inspects, when first asked, and keeps the most
// recently used ones. Only its certificate leaves the process, for the sandbox to trust.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "vibepit/tls/x509.hpp"

namespace vibepit::tls {

// A leaf: its certificate, its key (the CA's leaf key, shared by every leaf), and the
// certificate as PEM.
struct Leaf {
  std::string host;
  X509Ptr cert;
  EVP_PKEY* key = nullptr;  // owned by the InspectionCa, which outlives its leaves' use
  std::string cert_pem;
};

class InspectionCa {
 public:
  struct Options {
    std::string session_id;                                    // in the CA's common name
    std::chrono::seconds lifetime{std::chrono::hours(24)};     // the CA's and every leaf's end
    std::chrono::seconds clock_skew{std::chrono::minutes(5)};  // NotBefore = now - skew
    std::size_t max_leaves = 1024;                             // leaves kept (least recent go)
  };
  struct Stats {
    std::uint64_t issued = 0;  // leaves made
    std::uint64_t reused = 0;  // leaves found in the cache
    std::size_t cached = 0;
  };

  explicit InspectionCa(Options opts);  // throws CertificateError
  InspectionCa(const InspectionCa&) = delete;
  InspectionCa& operator=(const InspectionCa&) = delete;

  const std::string& cert_pem() const { return cert_pem_; }
  X509* cert() const { return cert_.get(); }
  // The key every leaf certifies (a TLS server signs its handshakes with it).
  EVP_PKEY* leaf_key() const { return leaf_key_.get(); }
  // The leaf for `host`: a DNS name (normalised: lower case, no trailing dot) or an IP
  // address's text. Its subjectAltName names exactly that host; it ends when the CA does.
  // Safe from any thread; a leaf in use stays valid after it leaves the cache.
  std::shared_ptr<const Leaf> leaf(std::string_view host);
  Stats stats() const;

 private:
  std::shared_ptr<const Leaf> issue(const std::string& host) const;

  Options opts_;
  PkeyPtr key_;
  // The key of every leaf: made with the CA, kept beside its key, never written. A key per
  // leaf would guard nothing more (they would all live in this process) and cost a key
  // generation per host.
  PkeyPtr leaf_key_;
  X509Ptr cert_;
  std::string cert_pem_;
  std::chrono::system_clock::time_point not_after_;

  mutable std::mutex mu_;                          // the cache and the counts
  std::list<std::shared_ptr<const Leaf>> recent_;  // most recently used first
  std::unordered_map<std::string, std::list<std::shared_ptr<const Leaf>>::iterator> by_host_;
  Stats stats_;
};

}  // namespace vibepit::tls
