"""The engine the e2e tests run against, and a few calls to its API: Docker, rootful Podman's
Docker API, or rootless Podman's (e2e_harness re-exports all of it)."""

import http.client
import json
import os
import socket

# The engine under test: Docker, rootful Podman's Docker API (VIBEPIT_E2E_ENGINE=podman), or
# rootless Podman's, run by TEST_UID (podman-rootless); scripts/test.sh starts both Podman
# services. The docker CLI the fixtures use and vibepit both follow DOCKER_HOST there.
# Rootful Podman's socket is root's, so vibepit runs as root and the agent is the project's
# owner, TEST_UID, as it is on Docker; rootless Podman's is TEST_UID's, who runs vibepit.
TEST_UID = 4242          # the non-root user e2e sessions run as (files keep its ownership)
SOCKETS = {"docker": "/var/run/docker.sock", "podman": "/run/podman/podman.sock",
           "podman-rootless": "/run/user/%d/podman/podman.sock" % TEST_UID}
ENGINE = os.environ.get("VIBEPIT_E2E_ENGINE", "docker")
if ENGINE not in SOCKETS:
    raise SystemExit("VIBEPIT_E2E_ENGINE=%s: expected one of %s" % (ENGINE, ", ".join(SOCKETS)))
SOCKET = SOCKETS[ENGINE]
if ENGINE != "docker":
    os.environ["DOCKER_HOST"] = "unix://" + SOCKET
VIBEPIT_AS_ROOT = ENGINE == "podman"
ROOTLESS = ENGINE == "podman-rootless"
# Where workspaces are made: scripts/test.sh names a shared mount for rootless Podman, whose
# mount namespace sees the project filter's mounts only under one.
WORKDIR = os.environ.get("VIBEPIT_E2E_WORKDIR") or None


def engine_env(engine):
    """The environment for the docker CLI and vibepit to use `engine` (a benchmark uses
    both in one run)."""
    env = dict(os.environ)
    env.pop("DOCKER_HOST", None)
    if engine != "docker":
        env["DOCKER_HOST"] = "unix://" + SOCKETS[engine]
    return env


def docker_api(method, path, body=None, timeout=30, engine=None):
    """One call to the Engine API over its socket (status, parsed body): for looking, and
    for probing what a test must show is impossible (an exec in the proxy)."""
    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(SOCKETS[engine or ENGINE])
    c = Conn("docker")
    data = json.dumps(body) if body is not None else None
    c.request(method, "/v1.41" + path, body=data,
              headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw) if raw else None
    except ValueError:
        return r.status, raw.decode(errors="replace")


def limits_enforced(engine=None):
    """Whether the engine sets a container's memory, CPU and process limits: rootless
    Podman on cgroup v1 sets none ("not supported and ignored")."""
    if (engine or ENGINE) != "podman-rootless":
        return True
    _, info = docker_api("GET", "/info", engine=engine)
    return info.get("CgroupVersion") != "1"


def docker_ready(engine=None):
    try:
        status, _ = docker_api("GET", "/_ping", timeout=5, engine=engine)
        return status == 200
    except OSError:
        return False
