#pragma once
// Credentials for a session (docs/credentials.md): `--secret` on vibepit run and vibepit ci.
// The launcher reads each value into secret memory and hands it to the proxy over the
// start-up channel (control/startup_channel.hpp), never in the container's environment,
// arguments, labels, image or a file. The sandbox gets only a placeholder.
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vibepit/control/credentials.hpp"
#include "vibepit/policy/credential.hpp"
#include "vibepit/secret/secret.hpp"

namespace vibepit::launcher {

struct SessionSecret {
  policy::CredentialSpec spec;
  std::shared_ptr<secret::SecretBytes> value;  // the raw value, before the format
};

// `NAME=HOST:PORT[,header=H][,format=F][,file=PATH | ,stdin]`: the value from the host's
// environment variable NAME (which is then unset in this process), the file PATH, or one
// line of standard input (asked for on the terminal without echo when it is one). Throws
// std::invalid_argument saying what is wrong, never quoting the value.
SessionSecret read_secret_option(std::string_view text);
// Several, as given; a name twice, or one header twice on one host, is an error.
std::vector<SessionSecret> read_secret_options(const std::vector<std::string>& texts);

// A session's secrets: the --secret flags, then the credentials network.yaml names (canonical
// NAME=HOST:PORT,header=H,format=F, already approved) whose NAME no flag gives, each valued
// from the environment variable NAME. One whose variable is not set is left out, and `err`
// says so.
std::vector<SessionSecret> session_secrets(const std::vector<std::string>& flags,
                                           const std::vector<std::string>& from_file,
                                           std::ostream& err);

// The sandbox's stand-in for secret NAME: "vibepit-secret-NAME".
std::string placeholder(std::string_view name);

// The start-up channel: the control server's credentials, then each secret's record.
std::shared_ptr<secret::SecretBytes> startup_channel(const control::PeerCredentials& server,
                                                     const std::vector<SessionSecret>& secrets);

}  // namespace vibepit::launcher
