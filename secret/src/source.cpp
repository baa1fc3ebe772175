#include "vibepit/secret/source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace vibepit::secret {
namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Read until end of file or `max` + 1 bytes into `out`; false with errno on a read error.
bool read_into(int fd, SecretBytes& out, std::size_t max) {
  for (;;) {
    const std::size_t room = std::min(out.capacity(), max + 1) - out.size();
    if (room == 0) return true;
    const ssize_t n = ::read(fd, out.data() + out.size(), room);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.resize(out.size() + static_cast<std::size_t>(n));
  }
}

void drop_line_end(SecretBytes& s) {
  const auto v = s.reveal();
  if (v.ends_with("\r\n")) {
    s.resize(v.size() - 2);
  } else if (v.ends_with('\n')) {
    s.resize(v.size() - 1);
  }
}

std::string too_large(const std::string& what) {
  return what + " holds more than " + std::to_string(SecretBytes::kMaxValue) + " bytes";
}

}  // namespace

std::shared_ptr<SecretBytes> read_file(const std::string& path) {
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (f.fd < 0)
    throw SourceError("cannot open secret file \"" + path + "\": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw SourceError("secret file \"" + path + "\" is not a regular file");
  // Room for the largest value, its line end, and one byte to tell a file that is too large.
  constexpr std::size_t max = SecretBytes::kMaxValue + 2;
  SecretBytes buf(max + 1);
  if (!read_into(f.fd, buf, max))
    throw SourceError("cannot read secret file \"" + path + "\": " + std::strerror(errno));
  drop_line_end(buf);
  if (buf.size() > SecretBytes::kMaxValue)
    throw SourceError(too_large("secret file \"" + path + "\""));
  if (buf.empty()) throw SourceError("secret file \"" + path + "\" is empty");
  return buf.fitted();
}

std::shared_ptr<SecretBytes> take_env(const std::string& name) {
  char* value = std::getenv(name.c_str());
  if (value == nullptr) throw SourceError("environment variable " + name + " is not set");
  const std::size_t n = std::strlen(value);
  struct Scrub {
    const std::string& name;
    char* value;
    std::size_t n;
    ~Scrub() {
      wipe(value, n);
      ::unsetenv(name.c_str());
    }
  } scrub{name, value, n};
  if (n == 0) throw SourceError("environment variable " + name + " is empty");
  if (n > SecretBytes::kMaxValue) throw SourceError(too_large("environment variable " + name));
  auto out = std::make_shared<SecretBytes>(n);
  out->append({value, n});
  return out;
}

std::shared_ptr<SecretBytes> read_all(int fd, std::size_t max) {
  if (max == 0 || max > SecretBytes::kMaxSize - 1)
    throw std::invalid_argument("read_all: max out of range");
  auto out = std::make_shared<SecretBytes>(max + 1);
  if (!read_into(fd, *out, max))
    throw SourceError(std::string("cannot read the start-up channel: ") + std::strerror(errno));
  if (out->size() > max)
    throw SourceError("the start-up channel sent more than " + std::to_string(max) + " bytes");
  return out;
}

}  // namespace vibepit::secret
