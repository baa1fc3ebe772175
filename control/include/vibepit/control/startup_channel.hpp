#pragma once
// The start-up channel: what the launcher hands vibepit-proxy on an inherited descriptor
// (--credentials-fd; in a session, the container's stdin) before it is ready. Never in
// arguments, the environment, labels, the image or a file. The bytes are:
//
//   {"ca": PEM, "cert": PEM, "key": PEM}\n          the control server's credentials
//   secret NAME=HOST:PORT,header=H,format=F LEN\n    per credential (docs/credentials.md):
//   VALUE\n                                          its value, LEN bytes, then a newline
//
// and the end of the stream. They are read into secret memory and wiped there.
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/control/credentials.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::control {

struct StartupChannel {
  PeerCredentials server;
  std::vector<policy::Credential> credentials;
};

// Everything until the end of the stream on `fd` (which is then closed), parsed. Throws
// std::runtime_error naming what is wrong, never a value's bytes.
StartupChannel read_startup_channel(int fd);
// The same from bytes already read (fuzzed, and tested without a descriptor).
StartupChannel parse_startup_channel(std::string_view bytes);

// One credential's record, appended to `out` (the launcher's side).
void append_secret_record(secret::SecretBytes& out, const policy::CredentialSpec& spec,
                          std::string_view value);
// The size append_secret_record needs for it.
std::size_t secret_record_size(const policy::CredentialSpec& spec, std::size_t value_size);

}  // namespace vibepit::control
