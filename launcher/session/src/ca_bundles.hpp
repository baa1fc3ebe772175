#pragma once
// Where TLS inspection's certificates live in a session (docs/security.md "Inspection"):
// the proxy writes the inspection CA's certificate into its control directory; the sandbox
// trusts a bundle of the host's CAs and that one, mounted read-only, through the variables
// its tools read; the proxy trusts the host's CAs (and --upstream-ca) for upstreams.
#include <string>
#include <vector>

namespace vibepit::launcher {

inline constexpr const char* kInspectCaName = "inspect-ca.pem";  // in the control directory
inline constexpr const char* kSandboxCaBundle = "/etc/vibepit/ca-bundle.pem";
inline constexpr const char* kProxyUpstreamCa = "/etc/vibepit/upstream-ca.pem";
// Their host sides, in the session directory.
inline constexpr const char* kSandboxCaFile = "ca-bundle.pem";
inline constexpr const char* kUpstreamCaFile = "upstream-ca.pem";

// The host's CA bundle (the first of the usual places that has one), or empty.
std::string system_cas();

// The sandbox's variables that point its tools at `bundle`: OpenSSL, curl, Python's
// requests, Node.js, git and pip.
std::vector<std::string> ca_bundle_env(const std::string& bundle);

}  // namespace vibepit::launcher
