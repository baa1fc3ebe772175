#!/usr/bin/env bash
# Set-up command (1): install, build, and run the main job: vibepit-proxy with the example
# config (docs/examples/proxy.json), until Ctrl-C. Pass another config file as $1.
# It serves the mTLS control API for a local session, so `build/bin/vibepit allow-http ...`
# works from another terminal (the session's client credentials go to $session).
# It installs only what building the proxy and the CLI needs (scripts/deps.txt, group build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release -DVIBEPIT_TESTS=OFF -DVIBEPIT_BENCH=OFF
config="${1:-docs/examples/proxy.json}"
session="${XDG_STATE_HOME:-$HOME/.local/state}/vibepit/sessions/local"
echo "run: build/bin/vibepit-proxy --config $config --session-dir $session"
exec build/bin/vibepit-proxy --config "$config" --session-dir "$session"
