#!/usr/bin/env bash
# Set-up command (1): install, build, and run the main job: a vibepit session. It runs
# `vibepit run` with the default sandbox image and the github, npm and pypi presets in an
# example project ($HOME/vibepit-example, made when missing; pass another PATH to use your
# own). On a terminal you get a bash shell in the sandbox: leave it with `exit` or Ctrl-D,
# and the session's containers and networks go with it. Without a terminal the shell reads
# standard input and exits at its end. The first run builds the images (about a minute:
# debootstrap when no debian:bookworm-slim image is there). When no Docker engine answers,
# this starts dockerd, and stops it when the session ends.
#   scripts/run.sh [PATH]            the session
#   scripts/run.sh --proxy [CONFIG]  only vibepit-proxy, with docs/examples/proxy.json and a
#                                    local control API session (no Docker needed)
# It installs what building and running vibepit needs (scripts/deps.txt, group build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release -DVIBEPIT_TESTS=OFF -DVIBEPIT_BENCH=OFF

if [ "${1:-}" = "--proxy" ]; then
  config="${2:-docs/examples/proxy.json}"
  session="${XDG_STATE_HOME:-$HOME/.local/state}/vibepit/sessions/local"
  echo "run: build/bin/vibepit-proxy --config $config --session-dir $session"
  exec build/bin/vibepit-proxy --config "$config" --session-dir "$session"
fi

project="${1:-$HOME/vibepit-example}"
if [ ! -e "$project" ]; then
  mkdir -p "$project"
  cat >"$project/README.md" <<'TEXT'
# vibepit example project

Made by vibepit's scripts/run.sh. Inside the sandbox this directory is the working
directory; try:

    curl -sI https://github.com/          # allowed by the github preset
    curl -sI https://example.com/         # 403, and the Proxy-Status header says why

and, from a terminal on the host, `vibepit allow-http example.com:443` to open it.
TEXT
  # As root, the sandbox's user `code` is 1000:1000 (never root); let it write here.
  if [ "$(id -u)" -eq 0 ]; then chown -R 1000:1000 "$project"; fi
fi

# shellcheck source=scripts/docker-engine.sh
. scripts/docker-engine.sh
start_docker
trap stop_docker EXIT
trap 'exit 130' INT TERM HUP

echo "run: build/bin/vibepit run -p github -p npm -p pypi $project"
echo "run: a shell in the sandbox follows; leave it with exit or Ctrl-D"
status=0
build/bin/vibepit run -p github -p npm -p pypi "$project" || status=$?
exit "$status"
