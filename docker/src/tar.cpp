#include "vibepit/docker/tar.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace vibepit::docker {
namespace {

constexpr std::size_t kBlock = 512;

void octal(char* field, std::size_t width, std::uint64_t value) {
  // width - 1 digits and a NUL, as ustar readers expect.
  std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                static_cast<unsigned long long>(value));
}

void check_path(std::string_view path) {
  if (path.empty() || path.front() == '/')
    throw std::invalid_argument("tar: path must be relative: \"" + std::string(path) + "\"");
  std::size_t start = 0;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(start, end - start) == "..")
      throw std::invalid_argument("tar: path climbs out: \"" + std::string(path) + "\"");
    start = end + 1;
  }
}

}  // namespace

void TarWriter::header(std::string_view path, char type, std::uint64_t size, std::uint32_t mode,
                       std::string_view link) {
  check_path(path);
  char h[kBlock] = {};
  // name (100) and prefix (155): split at a '/' when the path is longer than 100 bytes.
  std::string_view name = path, prefix;
  if (path.size() > 100) {
    auto cut = path.rfind('/', 155);
    if (cut == std::string_view::npos || path.size() - cut - 1 > 100 || cut == 0)
      throw std::invalid_argument("tar: path too long for ustar: \"" + std::string(path) + "\"");
    prefix = path.substr(0, cut);
    name = path.substr(cut + 1);
  }
  if (link.size() > 100)
    throw std::invalid_argument("tar: link target too long: \"" + std::string(link) + "\"");
  std::memcpy(h, name.data(), name.size());
  octal(h + 100, 8, mode & 07777);
  octal(h + 108, 8, 0);  // uid
  octal(h + 116, 8, 0);  // gid
  octal(h + 124, 12, size);
  octal(h + 136, 12, 0);  // mtime: fixed, so the same content gives the same archive
  h[156] = type;
  // ustar's fields are NUL-padded, not NUL-terminated: a 100-byte target fills its field,
  // and the version is "00" without one.
  // NOLINTBEGIN(bugprone-not-null-terminated-result)
  if (!link.empty()) std::memcpy(h + 157, link.data(), link.size());
  std::memcpy(h + 257, "ustar", 6);  // magic "ustar\0", version "00"
  std::memcpy(h + 263, "00", 2);
  // NOLINTEND(bugprone-not-null-terminated-result)
  if (!prefix.empty()) std::memcpy(h + 345, prefix.data(), prefix.size());
  std::memset(h + 148, ' ', 8);  // the checksum is summed with its own field as spaces
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);  // six digits, NUL, and the space left in place
  out_.append(h, kBlock);
}

void TarWriter::add_file(std::string_view path, std::string_view content, std::uint32_t mode) {
  header(path, '0', content.size(), mode);
  out_.append(content);
  out_.append((kBlock - content.size() % kBlock) % kBlock, '\0');
}

void TarWriter::add_directory(std::string_view path, std::uint32_t mode) {
  std::string p(path);
  if (p.empty() || p.back() != '/') p.push_back('/');
  header(p, '5', 0, mode);
}

void TarWriter::add_symlink(std::string_view path, std::string_view target) {
  header(path, '2', 0, 0777, target);
}

std::string TarWriter::finish() {
  out_.append(2 * kBlock, '\0');
  std::string done;
  done.swap(out_);
  return done;
}

}  // namespace vibepit::docker
