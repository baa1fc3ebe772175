# Sourced by scripts/run.sh and scripts/test.sh: a Docker engine for vibepit run and the e2e
# tests. start_docker starts dockerd in the background when none answers (and says where
# its log is); stop_docker stops only a dockerd that start_docker started. start_podman and
# stop_podman do the same for rootful Podman's Docker API (the e2e tests' second engine) at
# podman_socket.
dockerd_pid=""
dockerd_log="${TMPDIR:-/tmp}/vibepit-dockerd.log"

# wait_for_engine WHAT PID LOG CHECK...: true once CHECK succeeds; false, with the end of LOG,
# when PID ends first or a minute passes.
wait_for_engine() {
  local what="$1" pid="$2" log="$3" i
  shift 3
  for i in $(seq 1 120); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "$what did not come up; the end of its log:" >&2
  tail -20 "$log" >&2
  return 1
}

docker_answers() { docker info >/dev/null 2>&1; }

start_docker() {
  if docker_answers; then return 0; fi
  echo "docker: no Docker engine answers; starting dockerd (log: $dockerd_log)"
  dockerd >"$dockerd_log" 2>&1 &
  dockerd_pid=$!
  wait_for_engine "docker: dockerd" "$dockerd_pid" "$dockerd_log" docker_answers
}

# stop_started PID: end a process this shell started (nothing for an empty PID).
stop_started() {
  [ -n "$1" ] || return 0
  kill "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

stop_docker() {
  stop_started "$dockerd_pid"
  dockerd_pid=""
}

podman_socket=/run/podman/podman.sock
podman_pid=""
podman_log="${TMPDIR:-/tmp}/vibepit-podman.log"

podman_answers() {
  curl -sf --max-time 5 --unix-socket "$podman_socket" http://podman/_ping >/dev/null 2>&1
}

start_podman() {
  if podman_answers; then return 0; fi
  echo "podman: no Podman API answers at $podman_socket; starting podman system service (log: $podman_log)"
  mkdir -p "$(dirname "$podman_socket")"
  podman system service --time=0 "unix://$podman_socket" >"$podman_log" 2>&1 &
  podman_pid=$!
  wait_for_engine "podman: the service" "$podman_pid" "$podman_log" podman_answers
}

stop_podman() {
  stop_started "$podman_pid"
  podman_pid=""
}

# Rootless Podman, run by the e2e tests' user (tests/e2e/e2e_harness.py: TEST_UID), made
# here as a person's would be: the user, with subordinate ids and a home for Podman's store,
# /run/user/UID, and /dev/net/tun open to every user (as udev leaves it; slirp4netns needs
# it). Rootless Podman sees the project filter's mounts only under a shared mount (systemd
# makes / shared at boot; a machine without it does not), so the tests' workspaces are made
# in rootless_workdir, a shared mount of its own. stop_podman_rootless stops the service,
# the containers and the process that keeps the user's namespaces, and unmounts that.
rootless_uid=4242
rootless_user=vibepit-e2e
# (not under /var/lib: Podman 4.3 mounts a directory of its own over /var/lib in the mount
# namespace it sets networks up in, where a store there is then not found)
rootless_home=/home/vibepit-e2e
rootless_socket=/run/user/$rootless_uid/podman/podman.sock
rootless_workdir="${TMPDIR:-/tmp}/vibepit-e2e-rootless"
rootless_pid=""
rootless_log="${TMPDIR:-/tmp}/vibepit-podman-rootless.log"
rootless_mounted=""

rootless_answers() {
  curl -sf --max-time 5 --unix-socket "$rootless_socket" http://podman/_ping >/dev/null 2>&1
}

# "${as_rootless[@]}" CMD...: CMD as the rootless user, in its own environment
as_rootless=(setpriv --reuid "$rootless_uid" --regid "$rootless_uid" --init-groups --
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$rootless_home"
  XDG_RUNTIME_DIR="/run/user/$rootless_uid")

start_podman_rootless() {
  if ! getent passwd "$rootless_uid" >/dev/null; then
    useradd --uid "$rootless_uid" --user-group --home-dir "$rootless_home" --create-home \
      --shell /usr/sbin/nologin "$rootless_user" || return 1
  fi
  local name
  name=$(getent passwd "$rootless_uid" | cut -d: -f1)
  if ! grep -q "^$name:" /etc/subuid || ! grep -q "^$name:" /etc/subgid; then
    usermod --add-subuids 3000000-3065535 --add-subgids 3000000-3065535 "$name" || return 1
  fi
  mkdir -p "$rootless_home/.config/containers"
  # overlay in the user namespace (kernel 5.13+); Podman would otherwise pick vfs, which
  # copies every layer for every container
  [ -f "$rootless_home/.config/containers/storage.conf" ] ||
    printf '[storage]\ndriver = "overlay"\n' >"$rootless_home/.config/containers/storage.conf"
  chown -R "$rootless_uid:$rootless_uid" "$rootless_home"
  [ ! -c /dev/net/tun ] || [ "$(stat -c %a /dev/net/tun)" = 666 ] || chmod 0666 /dev/net/tun
  mkdir -p "$rootless_workdir"
  if ! findmnt -no TARGET "$rootless_workdir" | grep -qx "$rootless_workdir"; then
    mount --bind "$rootless_workdir" "$rootless_workdir" || return 1
    rootless_mounted=1
  fi
  mount --make-shared "$rootless_workdir" || return 1
  chmod 0755 "$rootless_workdir"
  if rootless_answers; then return 0; fi
  rootless_reset
  echo "podman: starting rootless podman system service as uid $rootless_uid (log: $rootless_log)"
  # A group of its own: Podman re-executes itself in the user's namespace, and the service
  # is that child; stop_podman_rootless ends the group. VIBEPIT_PODMAN_LOG_LEVEL=debug
  # logs each request.
  setsid "${as_rootless[@]}" podman --log-level="${VIBEPIT_PODMAN_LOG_LEVEL:-warn}" \
    system service --time=0 "unix://$rootless_socket" >"$rootless_log" 2>&1 &
  rootless_pid=$!
  wait_for_engine "podman: the rootless service" "$rootless_pid" "$rootless_log" rootless_answers
}

# What a rootless Podman leaves when its service ends: the process that keeps the user's
# namespaces (podman system migrate stops it), slirp4netns for the namespace its networks
# live in, and that namespace's files in the runtime directory, which the next service
# would otherwise take for a live namespace ("failed to mount runtime directory for
# rootless netns"). The directory goes, as it does when a person logs out.
# The user is the tests' own, so whatever still runs as it is what its Podman started:
# conmon waits 5 minutes after an exec ends before its clean-up runs podman again.
rootless_reset() {
  local run="/run/user/$rootless_uid" pids i
  "${as_rootless[@]}" podman system migrate >/dev/null 2>&1 || true
  # Ended, they may start podman once more for their clean-up: again until none is left.
  for i in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(ps -u "$rootless_uid" -o pid= 2>/dev/null)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null
    sleep 0.5
  done
  rm -rf "$run"
  mkdir -p "$(dirname "$rootless_socket")"
  chown -R "$rootless_uid:$rootless_uid" "$run"
  chmod 0700 "$run"
}

stop_podman_rootless() {
  if [ -n "$rootless_pid" ]; then
    kill -- "-$rootless_pid" 2>/dev/null
    wait "$rootless_pid" 2>/dev/null
    rootless_pid=""
    rootless_reset
  fi
  if [ -n "$rootless_mounted" ]; then
    umount -l "$rootless_workdir" 2>/dev/null
    rootless_mounted=""
  fi
}
