# Sourced by scripts/run.sh and scripts/test.sh: a Docker engine for vibepit run and the e2e
# tests. start_docker starts dockerd in the background when none answers (and says where
# its log is); stop_docker stops only a dockerd that start_docker started. start_podman and
# stop_podman do the same for rootful Podman's Docker API (the e2e tests' second engine) at
# podman_socket.
dockerd_pid=""
dockerd_log="${TMPDIR:-/tmp}/vibepit-dockerd.log"

start_docker() {
  if docker info >/dev/null 2>&1; then return 0; fi
  echo "docker: no Docker engine answers; starting dockerd (log: $dockerd_log)"
  dockerd >"$dockerd_log" 2>&1 &
  dockerd_pid=$!
  local i
  for i in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$dockerd_pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "docker: dockerd did not come up; the end of its log:" >&2
  tail -20 "$dockerd_log" >&2
  return 1
}

stop_docker() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null
    wait "$dockerd_pid" 2>/dev/null
    dockerd_pid=""
  fi
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
  local i
  for i in $(seq 1 120); do
    if podman_answers; then return 0; fi
    if ! kill -0 "$podman_pid" 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "podman: the service did not come up; the end of its log:" >&2
  tail -20 "$podman_log" >&2
  return 1
}

stop_podman() {
  if [ -n "$podman_pid" ]; then
    kill "$podman_pid" 2>/dev/null
    wait "$podman_pid" 2>/dev/null
    podman_pid=""
  fi
}
