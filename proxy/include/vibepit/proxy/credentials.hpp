#pragma once
// Credentials on their way upstream (docs/credentials.md): an inspected request allowed to a
// host that credentials name gets each one's header, in place of whatever the client sent.
// Nothing here is reached by a refused request, a plain-HTTP one or a tunnel.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/policy/snapshot.hpp"

namespace vibepit::proxy {

// Remove every field named `name` (any case) from a serialised request head.
void remove_fields(std::string& head, std::string_view name);

// Set the headers of the credentials `snap` has for host:port in `head` (a serialised request
// head ending in CRLF CRLF), and their names, comma-separated, in `names`. `scratch` is
// reused between calls. True when a secret is now in `head`: the caller wipes it once sent.
// The head's block is enlarged before the first secret byte goes in, so no block it leaves
// behind holds one.
bool add_credentials(const policy::Snapshot& snap, std::string_view host, std::uint16_t port,
                     std::string& head, std::vector<const policy::Credential*>& scratch,
                     std::string& names);

}  // namespace vibepit::proxy
