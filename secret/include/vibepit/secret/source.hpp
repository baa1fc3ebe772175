#pragma once
// Where a secret's value comes from, read straight into SecretBytes. Errors name the source
// and what is wrong with it, never a byte of the value.
#include <memory>
#include <stdexcept>
#include <string>

#include "vibepit/secret/secret.hpp"

namespace vibepit::secret {

class SourceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The whole content of a regular file (symbolic links are followed: Kubernetes mounts
// secrets through them), without one trailing line end ("\n" or "\r\n"). The file is left as
// it is. Throws SourceError when it cannot be read, is empty, or holds more than
// SecretBytes::kMaxSize bytes.
std::shared_ptr<SecretBytes> read_file(const std::string& path);

// The value of environment variable `name`, which is then gone: its bytes in the block the
// kernel shows as /proc/PID/environ are overwritten and the variable is unset. Throws
// SourceError when it is not set or is empty. Not thread-safe (as getenv/unsetenv are not):
// call it at start, before other threads run.
std::shared_ptr<SecretBytes> take_env(const std::string& name);

// Up to `max` bytes from `fd` until end of file, for a start-up channel. Throws SourceError
// on a read error or past `max`.
std::shared_ptr<SecretBytes> read_all(int fd, std::size_t max);

}  // namespace vibepit::secret
