#include "vibepit/proxy/credentials.hpp"

#include "vibepit/policy/name.hpp"

namespace vibepit::proxy {

void remove_fields(std::string& head, std::string_view name) {
  std::size_t line = head.find("\r\n");  // past the request line
  while (line != std::string::npos) {
    const std::size_t start = line + 2;
    const std::size_t end = head.find("\r\n", start);
    if (end == std::string::npos || end == start) return;  // the empty line ends the head
    const std::size_t colon = head.find(':', start);
    if (colon != std::string::npos && colon < end &&
        policy::iequals_ascii(std::string_view(head).substr(start, colon - start), name)) {
      head.erase(start, end + 2 - start);
      line = start - 2;
    } else {
      line = end;
    }
  }
}

bool add_credentials(const policy::Snapshot& snap, std::string_view host, std::uint16_t port,
                     std::string& head, std::vector<const policy::Credential*>& scratch,
                     std::string& names) {
  names.clear();
  if (!snap.credentials) return false;
  policy::credentials_for(host, port, snap, scratch);
  if (scratch.empty() || !head.ends_with("\r\n\r\n")) return false;
  std::size_t room = head.size();
  for (const auto* c : scratch) {
    remove_fields(head, c->spec.header);
    room += c->spec.header.size() + 4 + c->value->size();
    if (!names.empty()) names += ',';
    names += c->spec.name;
  }
  head.reserve(room);
  head.resize(head.size() - 2);  // the empty line comes back after the fields
  for (const auto* c : scratch) {
    head.append(c->spec.header).append(": ").append(c->value->reveal()).append("\r\n");
  }
  head.append("\r\n");
  return true;
}

}  // namespace vibepit::proxy
