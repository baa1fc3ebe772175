# Sourced by scripts/run.sh and scripts/test.sh: a Docker engine for vibepit run and the e2e
# tests. start_docker starts dockerd in the background when none answers (and says where
# its log is); stop_docker stops only a dockerd that start_docker started.
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
