#!/usr/bin/env bash
# Install what vibepit needs from Debian 12 packages (the table is scripts/deps.txt), then
# check that every command the chosen groups promise is on PATH.
#   scripts/install-deps.sh           build: what the main job (scripts/run.sh) needs
#   scripts/install-deps.sh --test    build + test: what scripts/test.sh needs
#   scripts/install-deps.sh --bench   build + test + bench: bench/compare.sh's peers too
# One line per step; a failing step prints its whole log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
deps="$here/deps.txt"

groups=(build)
for arg in "$@"; do
  case "$arg" in
    --test) groups+=(test) ;;
    --bench) groups+=(test bench) ;;
    -h | --help)
      sed -n '2,7s/^# \{0,1\}//p' "$0"
      exit 0
      ;;
    *)
      echo "install-deps: unknown option $arg (see --help)" >&2
      exit 2
      ;;
  esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || {
    echo "install-deps: run as root, or install sudo" >&2
    exit 1
  }
  SUDO="sudo"
fi

in_groups() {
  local g
  for g in "${groups[@]}"; do [ "$g" = "$1" ] && return 0; done
  return 1
}

packages=()
commands=()
declare -A package_of=()
while read -r group package rest; do
  case "$group" in '' | '#'*) continue ;; esac
  in_groups "$group" || continue
  line_commands=(${rest%%#*})
  for c in "${line_commands[@]}"; do
    commands+=("$c")
    package_of[$c]="${package%\?}"
  done
  # PACKAGE? is wanted only for its commands: where another package gives every one of them
  # already (a kubectl of the machine's own), it is not installed over it.
  if [[ "$package" == *\? ]]; then
    package="${package%\?}"
    have_all=1
    for c in "${line_commands[@]}"; do command -v "$c" >/dev/null || have_all=""; done
    if [ -n "$have_all" ]; then
      echo "install-deps: ${line_commands[*]} already present; not installing $package"
      continue
    fi
  fi
  packages+=("$package")
done <"$deps"

# step WHAT CMD...: one line when it works, the full output when it does not.
step() {
  local what="$1" log t0=$SECONDS rc=0
  shift
  log="$(mktemp)"
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "install-deps: $what ($((SECONDS - t0)) s)"
    rm -f "$log"
    return 0
  fi
  echo "install-deps: $what FAILED (exit $rc); its output:" >&2
  sed 's/^/  | /' "$log" >&2
  rm -f "$log"
  exit 1
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# The benchmark peers are services in Debian; installing one must not start it (squid
# would take 3128, the proxy's own port). A policy-rc.d that says "no" does that, for the
# length of our install only, and only if the machine has none of its own.
policy_rc=/usr/sbin/policy-rc.d
our_policy=""
remove_policy() { [ -z "$our_policy" ] || $SUDO rm -f "$policy_rc"; }
trap remove_policy EXIT

if [ "${#missing[@]}" -gt 0 ]; then
  step "apt-get update" $SUDO apt-get update
  if in_groups bench && [ ! -e "$policy_rc" ]; then
    printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts during its install\nexit 101\n' |
      $SUDO tee "$policy_rc" >/dev/null
    $SUDO chmod 755 "$policy_rc"
    our_policy=1
  fi
  step "installed ${#missing[@]} packages: ${missing[*]}" \
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}"
  remove_policy
  our_policy=""
else
  echo "install-deps: all ${#packages[@]} packages of (${groups[*]}) already installed"
fi

# Peers installed before this script learnt to keep them stopped may still be running.
if in_groups bench && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  for svc in squid tinyproxy unbound dnsdist; do
    if systemctl is-active --quiet "$svc" 2>/dev/null; then
      step "stopped the $svc service (the benchmarks run their own copy)" $SUDO systemctl stop "$svc"
    fi
  done
fi

# vibepit run by an ordinary user mounts the project's filter (FUSE) so that the Docker
# engine, which is root, can bind it into the sandbox: fusermount3 allows that only with
# user_allow_other (docs/security.md, "The project's git directory").
# /dev/fuse is open to every user where udev runs (its default rules); a machine without
# udev (a container, a minimal VM) leaves it root's only.
if [ -c /dev/fuse ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
  step "opened /dev/fuse to every user, as udev would (vibepit's project filter)" \
    $SUDO chmod 0666 /dev/fuse
fi
if ! grep -qx 'user_allow_other' /etc/fuse.conf 2>/dev/null; then
  step "enabled user_allow_other in /etc/fuse.conf (vibepit's project filter)" \
    $SUDO sh -c 'echo user_allow_other >> /etc/fuse.conf'
fi

# The tests check the Kubernetes manifests against the API's schemas (tests/deploy): npm
# installs the pinned, hash-checked packages of tests/deploy/schemas/package-lock.json into a
# cache outside the clone, again only when the lock file changed. No package script runs.
if in_groups test; then
  schemas="$here/../tests/deploy/schemas"
  cache="${VIBEPIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vibepit}/k8s-schemas"
  if ! cmp -s "$schemas/package-lock.json" "$cache/package-lock.json" ||
    [ ! -d "$cache/node_modules/kubernetes-models" ]; then
    rm -rf "$cache"
    mkdir -p "$cache"
    cp "$schemas/package.json" "$schemas/package-lock.json" "$cache/"
    step "installed the Kubernetes API schemas into $cache (npm ci)" \
      npm ci --prefix "$cache" --ignore-scripts --no-audit --no-fund
  fi
fi

# Every command the groups promise must now be there: a package that no longer ships one, or a
# deps.txt line with the wrong package, fails here and not halfway through the test suite.
absent=()
for c in "${commands[@]}"; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$c" >/dev/null || absent+=("$c (package ${package_of[$c]})")
done
if [ "${#absent[@]}" -gt 0 ]; then
  echo "install-deps: missing after install: ${absent[*]}" >&2
  exit 1
fi
echo "install-deps: ${#commands[@]} commands present for (${groups[*]})"
