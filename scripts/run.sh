#!/usr/bin/env bash
# Set-up command (1): install, build, and run the main job: vibepit-proxy with the example
# config (docs/examples/proxy.json), until Ctrl-C. Pass another config file as $1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
config="${1:-docs/examples/proxy.json}"
echo "run: build/bin/vibepit-proxy --config $config"
exec build/bin/vibepit-proxy --config "$config"
