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
