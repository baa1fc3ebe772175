#pragma once
// The vibepit CLI's exit codes (docs/cli.md).

namespace vibepit::launcher {

// Exit codes.
enum Exit : int {
  kOk = 0,
  kRefused = 1,     // the proxy answered with an error
  kUsage = 2,       // bad arguments or invalid entries (nothing was sent)
  kNoSession = 3,   // no session found, several and none chosen, or the proxy did not answer
  kLocalError = 4,  // a local file could not be read or written (.vibepit/network.yaml)
};

// vibepit run's and vibepit ci's own failures: the command never ran (Docker's convention).
inline constexpr int kRunFailed = 125;
// vibepit run's when the session was removed from outside while the command ran (vibepit
// down, vibepit prune): 128 + SIGKILL, as for a container that `docker rm -f` kills.
inline constexpr int kRunRemoved = 137;

}  // namespace vibepit::launcher
