#pragma once
// SHA-256 (OpenSSL), for the content hashes that tag images and name projects, caches and
// the git shield's fingerprints.
#include <string>
#include <string_view>

#include <openssl/types.h>

namespace vibepit::launcher {

// A digest fed in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::string_view d);
  std::string hex();  // the digest as lower-case hex; call once, at the end

 private:
  EVP_MD_CTX* ctx_;
};

// SHA-256 of bytes, as lower-case hex.
std::string sha256_hex(std::string_view data);

}  // namespace vibepit::launcher
