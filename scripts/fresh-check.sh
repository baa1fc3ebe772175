#!/usr/bin/env bash
# The README's two set-up commands, run as a new user would: on a minimal Debian 12 root
# filesystem (debootstrap --variant=minbase bookworm) holding a clean clone of HEAD.
#
#   scripts/fresh-check.sh [--quick] [--no-ccache] [--keep] [--refresh] [--mirror URL]
#
#   --quick     the second command as `scripts/test.sh --quick` (release stage only)
#   --no-ccache compile and tidy without this machine's caches (see below)
#   --keep      keep the root filesystem afterwards (its path is printed)
#   --refresh   rebuild the cached base system instead of reusing it
#   --mirror    the Debian mirror to use (default: the machine's, from its apt sources)
#
# Run it before resolving an issue that changes dependencies, scripts or the test harness.
# The first command (scripts/run.sh) runs without a terminal: it must make a session (a
# Docker engine it starts inside the root filesystem, the images, vibepit run), whose shell
# then reads the end of its input, and exit 0. The second (scripts/test.sh) runs to its
# summary line. Everything runs in a private mount and PID namespace: when the check ends,
# however it ends (even by SIGKILL), its mounts, its network namespaces and its processes
# end with it. No other dockerd may run meanwhile (they would share the network namespace).
# Needs root. Uncommitted changes are not part of the check: commit first.
#
# The machine's compiler cache: when this machine has ccache, its cache directory is
# mounted at the fresh root's (/root/.cache/ccache), so a build that this machine has
# compiled before takes a minute instead of seven. That hides no install step: ccache
# keys an object on the compiler and on the content of every header it read, so a missing
# package still fails the compile, and linking is never cached. clang-tidy's cache of files
# found clean (scripts/tidy.py) is mounted likewise, on the same grounds: its key is the
# preprocessed source, so a missing header still fails the check.
set -euo pipefail

suite=bookworm
cache_dir="${VIBEPIT_FRESH_CACHE:-/var/cache/vibepit/fresh-check}"
ready_timeout=2400 # s: installs, builds the release preset and the images first
quick="" keep="" refresh="" mirror="" use_ccache=1

# ---------------------------------------------------------------- inside the namespaces
# Called by the outer half as: fresh-check.sh --inside ROOT QUICK CCACHE_DIR TIDY_DIR. PID 1
# of a new PID namespace, in a private mount namespace.
if [ "${1:-}" = "--inside" ]; then
  root="$2" quick="$3" ccache_dir="${4:-}" tidy_dir="${5:-}"
  mount --bind "$root" "$root" # `ip netns exec` runs `mount --make-rslave /`: / must be a mount
  mount --make-private "$root"
  mount -t proc proc "$root/proc" # this PID namespace's /proc
  mount -t sysfs sysfs "$root/sys"
  mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup" # for the dockerd that the scripts start
  mount --make-rslave "$root/sys/fs/cgroup"
  mount --rbind /dev "$root/dev"
  mount --make-rslave "$root/dev"
  mount -t tmpfs -o mode=755 tmpfs "$root/run" # /run/netns lives here, and goes with it
  mkdir -p "$root/run/lock"
  if [ -n "$ccache_dir" ]; then # see "The machine's compiler cache" below
    mkdir -p "$root/root/.cache/ccache"
    mount --bind "$ccache_dir" "$root/root/.cache/ccache"
  fi
  if [ -n "$tidy_dir" ]; then
    mkdir -p "$root/root/.cache/vibepit/tidy"
    mount --bind "$tidy_dir" "$root/root/.cache/vibepit/tidy"
  fi
  exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash /fresh-check/inside.sh "$quick"
fi

# ---------------------------------------------------------------- outside
usage() { sed -n '2,19s/^# \{0,1\}//p' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --keep) keep=1 ;;
    --no-ccache) use_ccache="" ;;
    --refresh) refresh=1 ;;
    --mirror)
      mirror="${2:?--mirror needs a URL}"
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "fresh-check: unknown option $1" >&2
      usage >&2
      exit 2
      ;;
  esac
  shift
done

say() { echo "fresh-check: $*"; }
die() {
  echo "fresh-check: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mounts, network namespaces)"
# The scripts start a Docker engine inside the root filesystem; on the same network
# namespace a second engine would fight the first over docker0 and the iptables chains.
if pgrep -x dockerd >/dev/null; then
  die "a Docker engine (dockerd) runs on this machine; the check starts its own inside the root filesystem: stop it first"
fi
self="$(realpath "$0")"
repo="$(cd "$(dirname "$self")/.." && pwd)"
head="$(git -C "$repo" rev-parse HEAD)" || die "$repo is not a git checkout"
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  say "note: uncommitted changes in $repo are not part of this check (it clones HEAD)"
fi

# The machine's own tools for the check: debootstrap (and unshare, from util-linux).
if ! command -v debootstrap >/dev/null; then
  log="$(mktemp)"
  if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
    --no-install-recommends debootstrap; } >"$log" 2>&1; then
    cat "$log" >&2
    die "could not install debootstrap (output above)"
  fi
  rm -f "$log"
  say "installed debootstrap"
fi

# The machine's configured Debian mirror: the first apt source that serves $suite, from
# one-line sources.list files or deb822 .sources files.
find_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++;
      if ($(i + 1) == s) { print $i; exit } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" 'BEGIN { RS = ""; FS = "\n" }
      { uri = ""; ok = 0; deb = 1
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) { split($i, a, /[ \t]+/); uri = a[2] }
          if ($i ~ /^Suites:/) { n = split($i, a, /[ \t]+/); for (j = 2; j <= n; j++) if (a[j] == s) ok = 1 }
          if ($i ~ /^Types:/ && $i !~ /(^|[ \t])deb([ \t]|$)/) deb = 0
          if ($i ~ /^Enabled:[ \t]*no/) deb = 0 }
        if (ok && deb && uri != "") { print uri; exit } }' "$f"
  done
}
security_mirror() {
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | grep -v -E '^[[:space:]]*#' | grep -o -E 'https?://[^ ]*debian-security[^ ]*' |
    head -1 || true
}
if [ -z "$mirror" ]; then
  mirror="$(find_mirror | head -1)"
  [ -n "$mirror" ] || die "no apt source for $suite in /etc/apt/sources.list{,.d}: pass --mirror URL"
fi
say "HEAD $head, mirror $mirror"

# ---------------------------------------------------------------- base system, cached
mkdir -p "$cache_dir"
key="$(printf '%s %s minbase' "$mirror" "$suite" | sha256sum | cut -c1-12)"
tarball="$cache_dir/$suite-minbase-$key.tar.gz"
work="$(mktemp -d /var/tmp/vibepit-fresh.XXXXXX)"
root="$work/root"
inner_pid=""

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$inner_pid" ] && kill -0 "$inner_pid" 2>/dev/null; then
    # unshare --fork ignores SIGINT and SIGTERM while it waits; SIGKILL ends it, and
    # --kill-child then SIGKILLs the namespace's PID 1, which takes every process with it.
    kill -KILL "$inner_pid" 2>/dev/null || true
    wait "$inner_pid" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && ls "$root"/fresh-check/*.log >/dev/null 2>&1; then
    rm -rf "$cache_dir/last-failure"
    mkdir -p "$cache_dir/last-failure"
    cp "$root"/fresh-check/*.log "$cache_dir/last-failure/"
    say "logs of the failed run: $cache_dir/last-failure/"
  fi
  # The namespaces' mounts are gone with them; none were made in the machine's namespace.
  if grep -qF " $work/" /proc/self/mounts; then
    echo "fresh-check: mounts under $work remain; not removing it" >&2
    rc=1
  elif [ -n "$keep" ]; then
    say "kept $root"
  else
    rm -rf --one-file-system "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "fresh-check: interrupted" >&2; exit 130' INT TERM

t0=$SECONDS
if [ -n "$refresh" ] || [ ! -s "$tarball" ]; then
  say "debootstrap --variant=minbase $suite (cached as $tarball)"
  mkdir -p "$work/base"
  if ! debootstrap --variant=minbase "$suite" "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -30 "$work/debootstrap.log" >&2
    die "debootstrap failed (last lines above)"
  fi
  tar -C "$work/base" --numeric-owner -czf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf --one-file-system "$work/base"
fi
mkdir -p "$root"
tar -C "$root" --numeric-owner -xzf "$tarball"
say "base system ready ($((SECONDS - t0)) s)"

# What a new machine has: its network settings and its Debian sources, nothing of ours.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
{
  printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$suite" "$suite"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if sec="$(security_mirror)" && [ -n "$sec" ]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$sec" "$suite"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} >"$root/etc/apt/sources.list.d/debian.sources"
rm -f "$root/etc/apt/sources.list"
# How this machine reaches that mirror (a proxy, or a mirror's relaxed Valid-Until) applies
# to the new one as well.
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -q 'Acquire::' "$f" && cp "$f" "$root/etc/apt/apt.conf.d/"
done
# Likewise how it reaches the npm registry (the tests install a schema package from it):
# npm's certificate authorities, when this machine's npm is told of its own (a proxy's CA),
# go to the new root's npm configuration, and nothing else of npm's.
if command -v npm >/dev/null && npm_ca="$(npm config get cafile 2>/dev/null)" &&
  [ -n "$npm_ca" ] && [ "$npm_ca" != null ] && [ -r "$npm_ca" ]; then
  mkdir -p "$root/root"
  cp -L "$npm_ca" "$root/etc/fresh-check-npm-ca.pem"
  printf 'cafile=/etc/fresh-check-npm-ca.pem\n' >"$root/root/.npmrc"
fi
# The root user's git identity is not needed: the clone is only checked out.
mkdir -p "$root/root"
git clone --quiet --no-local --no-checkout "$repo" "$root/root/vibepit"
git -C "$root/root/vibepit" checkout --quiet --detach "$head"

mkdir -p "$root/fresh-check"
cat >"$root/fresh-check/inside.sh" <<'INSIDE'
# Runs inside the fresh root: the README's two commands, as root, from the clone.
set -uo pipefail
quick="$1"
cd /root/vibepit
status=0
summary=()
log_dir=/fresh-check

# (1) scripts/run.sh, until vibepit-proxy says "ready:", then SIGINT.
# (1) scripts/run.sh: there is no terminal, so the sandbox's shell reads the end of its
# standard input and exits; the session must have been made and removed, exit 0.
echo "== (1) scripts/run.sh"
t0=$SECONDS
rc=0
timeout READY_TIMEOUT scripts/run.sh </dev/null >"$log_dir/run.log" 2>&1 || rc=$?
grep -v -E '^\[[0-9]+/[0-9]+\] ' "$log_dir/run.log" | sed 's/^/  | /'
if [ "$rc" -eq 0 ] && grep -q 'Creating sandbox' "$log_dir/run.log"; then
  summary+=("(1) scripts/run.sh: a session made, its shell run and the session removed, $((SECONDS - t0)) s")
elif [ "$rc" -eq 124 ]; then
  summary+=("(1) scripts/run.sh: FAILED: not done within READY_TIMEOUT s")
  status=1
else
  summary+=("(1) scripts/run.sh: FAILED: exit $rc$(grep -q 'Creating sandbox' "$log_dir/run.log" || echo ', no session made')")
  status=1
fi

# (2) scripts/test.sh, to its summary line.
args=()
[ -n "$quick" ] && args=(--quick)
echo "== (2) scripts/test.sh ${args[*]}"
t0=$SECONDS
VIBEPIT_TEST_NO_E2E=1 scripts/test.sh "${args[@]}" 2>&1 | tee "$log_dir/test.log"
rc=${PIPESTATUS[0]}
line="$(grep -E '^all: [0-9]+ passed, [0-9]+ failed' "$log_dir/test.log" | tail -1)"
[ -n "$line" ] || line="no summary line"
if [ "$rc" -eq 0 ]; then
  summary+=("(2) scripts/test.sh ${args[*]}: $line ($(((SECONDS - t0) / 60)) min)")
else
  summary+=("(2) scripts/test.sh ${args[*]}: FAILED, exit $rc: $line ($(((SECONDS - t0) / 60)) min)")
  status=1
fi

echo
echo "== fresh-check summary"
for s in "${summary[@]}"; do echo "  $s"; done
# The clear messages of a missing dependency, wherever in the logs they were printed.
grep -h -o -E "(MissingTool: .*|AssertionError: undeclared commands.*|install-deps: .*(FAILED|missing after install).*|test: .*)" \
  "$log_dir/run.log" "$log_dir/test.log" 2>/dev/null | sort -u | sed 's/^/  why: /'
exit "$status"
INSIDE
sed -i "s/READY_TIMEOUT/$ready_timeout/g" "$root/fresh-check/inside.sh"

ccache_dir="" tidy_dir=""
if [ -n "$use_ccache" ] && command -v ccache >/dev/null; then
  ccache_dir="$(ccache -k cache_dir)"
  mkdir -p "$ccache_dir"
  say "compiling through this machine's compiler cache, $ccache_dir (--no-ccache: without)"
fi
if [ -n "$use_ccache" ]; then
  tidy_dir="${XDG_CACHE_HOME:-$HOME/.cache}/vibepit/tidy"
  mkdir -p "$tidy_dir"
fi
say "running the README's commands in $root"
# --kill-child: if this script dies, the namespace's PID 1 gets SIGKILL and every process in
# it goes too; the mount namespace (and /run/netns in it) goes with the last of them.
unshare --mount --propagation private --pid --fork --kill-child -- \
  "$self" --inside "$root" "$quick" "$ccache_dir" "$tidy_dir" &
inner_pid=$!
rc=0
wait "$inner_pid" || rc=$?
inner_pid=""
say "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (exit $rc)") in $(((SECONDS - t0) / 60)) min"
exit "$rc"
