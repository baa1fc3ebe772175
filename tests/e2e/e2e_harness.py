"""End-to-end harness: a real Docker engine, the real vibepit CLI, and a fake internet.

The fake internet is a Docker network this test creates on 198.51.100.0/24 (labelled
dev.vibepit.test). Its bridge also holds one end of a veth whose other end sits in a
network namespace of ours, where the integration harness's fake DNS server (198.51.100.53)
and fake HTTP/echo upstream (198.51.100.10-.13) run. vibepit run uses that network as the
proxy's egress network (VIBEPIT_TEST_EGRESS_NETWORK) and the fake DNS as upstream, so no
test traffic goes anywhere else. The docker CLI is used for the fixtures and to look;
everything the product sets up, the product sets up.
"""

import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from tests.e2e.engines import (ENGINE, ROOTLESS, SOCKET, SOCKETS, TEST_UID,  # noqa: F401
                               VIBEPIT_AS_ROOT, WORKDIR, docker_api, docker_ready, engine_env,
                               limits_enforced)
from tests.integration.harness.control import TestCa
from tests.integration.harness.tools import need
from tests.integration.harness.wait import LIVENESS_S, wait_until  # noqa: F401 (for the tests)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

FAKES = os.path.join(REPO, "tests", "integration", "harness")
TLS_PORT = 4443  # the fake internet's HTTPS (FakeInternet.tls_ca signed its certificate)
SUBNET, GATEWAY = "198.51.100.0/24", "198.51.100.1"
DNS_ADDR = "198.51.100.53"
UPSTREAMS = ["198.51.100.10", "198.51.100.11", "198.51.100.12", "198.51.100.13"]
TEST_LABEL = "dev.vibepit.test"


def bin_dir():
    for i, a in enumerate(sys.argv):
        if a == "--bin-dir" and i + 1 < len(sys.argv):
            d = sys.argv[i + 1]
            del sys.argv[i:i + 2]
            return os.path.abspath(d)
    return os.path.abspath(os.environ.get("VIBEPIT_BIN_DIR", os.path.join(REPO, "build", "bin")))


BIN = None


def sh(*argv, check=True, capture=True, timeout=120, **kw):
    r = subprocess.run(list(argv), capture_output=capture, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv), r.returncode,
                                                   (r.stderr or "") + (r.stdout or "")))
    return r


def shared_objects(binary):
    """The libraries `binary` loads, with the loader, as ldd lists them."""
    out = []
    for line in sh("ldd", binary).stdout.splitlines():
        parts = line.split()
        path = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0]
        if path.startswith("/"):
            out.append(path)
    return out


def capabilities(container):
    """The capability sets of the container's first process, from the host's /proc: what
    engines state in their own words (Docker's CapDrop ["ALL"], Podman's list of every
    capability it would otherwise grant)."""
    pid = json.loads(sh("docker", "inspect", container).stdout)[0]["State"]["Pid"]
    with open("/proc/%d/status" % pid) as f:
        return {k: int(v, 16) for k, v in (line.split(":", 1) for line in f)
                if k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


def host_addresses_in(subnet):
    """The host's own IPv4 addresses inside `subnet` (an engine's bridge address there is a
    way from the containers on that network to the host's services)."""
    import ipaddress
    net = ipaddress.ip_network(subnet)
    out = []
    for line in sh("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        addr = line.split()[3].split("/")[0]
        if ipaddress.ip_address(addr) in net:
            out.append(addr)
    return out


class FakeInternet:
    """On `engine`, in the /24 `net` (198.51.100 by default: SUBNET, DNS_ADDR, UPSTREAMS);
    a second one beside it (a benchmark of both engines) takes 203.0.113."""

    def __init__(self, engine=None, net="198.51.100"):
        self.engine = engine or ENGINE
        self.env = engine_env(self.engine)
        suffix = {"docker": "", "podman": "p", "podman-rootless": "r"}[self.engine]
        self.name = "vpe2e%d%s" % (os.getpid(), suffix)
        self.ns = self.name + "net"
        self.bridge = "vpe2ebr%d%s" % (os.getpid() % 100000, suffix)
        self.veth = "vpe2ev%d%s" % (os.getpid() % 100000, suffix)
        self.subnet, self.gateway = net + ".0/24", net + ".1"
        self.dns_addr = net + ".53"
        self.upstreams = [net + ".%d" % i for i in (10, 11, 12, 13)]
        self.tmp = tempfile.mkdtemp(prefix=self.name + "-")
        self.procs = []
        self.made_user = False

    def start(self):
        self.made_user = ensure_test_user()
        need("ip")
        need("docker")
        need("setpriv")
        try:
            # Containers (the proxies) take addresses in the upper half, away from the fakes.
            # A rootless engine's networks are in a namespace of its own: its sessions reach
            # the fake internet through the host (slirp4netns), on a bridge of the host's.
            if self.engine != "podman-rootless":
                sh("docker", "network", "create", "--driver", "bridge", "--subnet",
                   self.subnet, "--gateway", self.gateway,
                   "--ip-range", self.subnet.replace(".0/24", ".128/25"),
                   "-o", "com.docker.network.bridge.name=" + self.bridge,
                   "--label", "%s=%d" % (TEST_LABEL, os.getpid()), self.name, env=self.env)
            if self.engine != "docker":
                # Rootful: netavark makes a network's bridge when a first container joins
                # it; the fake hosts' veth needs it now, so it is made here and netavark
                # takes it. Rootless: the host's bridge, on no engine network.
                sh("ip", "link", "add", "name", self.bridge, "type", "bridge")
                sh("ip", "addr", "add", self.gateway + "/24", "dev", self.bridge)
                sh("ip", "link", "set", self.bridge, "up")
            sh("ip", "netns", "add", self.ns)
            sh("ip", "-n", self.ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "vpe2ein",
               "netns", self.ns)
            sh("ip", "link", "set", self.veth, "master", self.bridge)
            sh("ip", "link", "set", self.veth, "up")
            for a in [self.dns_addr] + self.upstreams:
                sh("ip", "-n", self.ns, "addr", "add", a + "/24", "dev", "vpe2ein")
            sh("ip", "-n", self.ns, "link", "set", "vpe2ein", "up")
            self._start_fakes()
        except BaseException:
            self.close()
            raise
        return self

    def _popen(self, argv, log):
        with open(os.path.join(self.tmp, log + ".log"), "ab") as f:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns] + argv, stdout=f, stderr=f,
                                 stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def _start_fakes(self):
        stats = os.path.join(self.tmp, "dns-stats.json")
        ready = os.path.join(self.tmp, "upstream.ready")
        self._popen([sys.executable, os.path.join(FAKES, "fake_dns.py"), "--listen", self.dns_addr,
                     "--port", "53", "--stats", stats], "fake_dns")
        # HTTPS on TLS_PORT with a certificate for allowed.test and forbidden.test (a CDN's
        # two sites behind one address) and the names inspection's tests use, from a CA of
        # the module's own: tls_ca.
        ca = TestCa(os.path.join(self.tmp, "tls"))
        cert, key = ca.issue("upstream", "serverAuth",
                             san="DNS:allowed.test,DNS:forbidden.test,DNS:inspected.test,DNS:late.test")
        self.tls_ca = ca.cert
        argv = [sys.executable, os.path.join(FAKES, "fake_upstream.py"), "--ready", ready,
                "--log", os.path.join(self.tmp, "upstream-conns.ndjson"),
                "--http", "80,8080", "--echo", "443,8443",
                "--https", str(TLS_PORT), "--cert", cert, "--key", key]
        for a in self.upstreams:
            argv += ["--addr", a]
        self._popen(argv, "fake_upstream")

        def all_ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("a fake exited early: %s" % p.args)
            return os.path.exists(stats) and os.path.exists(ready)
        if not wait_until(all_ready, timeout=LIVENESS_S + 5):
            raise RuntimeError("fakes not ready")

    def dns_queries(self):
        with open(os.path.join(self.tmp, "dns-stats.json")) as f:
            return json.load(f)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        sh("ip", "netns", "del", self.ns, check=False)
        sh("ip", "link", "del", self.veth, check=False)
        if self.engine != "podman-rootless":
            sh("docker", "network", "rm", self.name, check=False, env=self.env)
        if self.engine != "docker":
            sh("ip", "link", "del", self.bridge, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.made_user:
            sh(need("userdel"), TEST_USER, check=False)


TEST_USER = "vibepit-e2e"


def ensure_test_user():
    """TEST_UID as a user of the system, as a person running vibepit is (fusermount3, which
    mounts the project's filter, looks them up). True if this call made it."""
    try:
        pwd.getpwuid(TEST_UID)
        return False
    except KeyError:
        pass
    r = sh(need("useradd"), "--uid", str(TEST_UID), "--user-group", "--no-create-home",
           "--shell", "/usr/sbin/nologin", TEST_USER, check=False)
    if r.returncode != 0:
        raise RuntimeError("cannot make the test user %d: %s" % (TEST_UID, r.stderr))
    return True


class Workspace:
    """A project, a home and a state directory, owned by the user vibepit runs as."""

    def __init__(self, uid=TEST_UID, as_root=None):
        self.uid = uid
        # vibepit itself as root (rootful Podman's socket is root's), the agent still `uid`
        self.as_root = VIBEPIT_AS_ROOT if as_root is None else as_root
        self.root = tempfile.mkdtemp(prefix="vpe2e-ws-", dir=WORKDIR)
        os.chmod(self.root, 0o755)
        self.project = os.path.join(self.root, "project")
        self.home = os.path.join(self.root, "home")
        self.state = os.path.join(self.root, "state")
        for d in (self.project, self.home, self.state):
            os.makedirs(d)
            os.chown(d, uid, uid)
        os.makedirs(os.path.join(self.project, ".git"))
        os.chown(os.path.join(self.project, ".git"), uid, uid)

    def env(self, internet, extra=None):
        env = dict(extra or {})
        env.update({"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                    "HOME": self.home, "XDG_STATE_HOME": self.state,
                    "NO_COLOR": "1",
                    # everything vibepit creates for the tests carries dev.vibepit.test=e2e
                    "VIBEPIT_TEST_LABEL": "e2e"})
        # On Docker the proxies share the fake internet's network as their egress network. On
        # Podman each session makes its own, as it does for users, and reaches the fake
        # internet through the host: netavark cleans up after a container asynchronously,
        # and the cleanup of one proxy on a shared network can take the next proxy's port
        # forward (its control API) with it.
        if internet.engine == "docker":
            env["VIBEPIT_TEST_EGRESS_NETWORK"] = internet.name
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "DOCKER_HOST"):
            if k in os.environ and k not in env:
                env[k] = os.environ[k]
        return env

    def argv(self, args):
        """vibepit ARGS as this workspace's user (in the docker group, as a user would be)."""
        vibepit = os.path.join(BIN, "vibepit")
        if self.uid == 0 or self.as_root:
            return [vibepit] + args
        docker_gid = grp.getgrnam("docker").gr_gid
        return [need("setpriv"), "--reuid", str(self.uid), "--regid", str(self.uid),
                "--groups", str(docker_gid), "--"] + [vibepit] + args

    def vibepit(self, internet, args, timeout=180, input=None, extra_env=None):
        return subprocess.run(self.argv(args), env=self.env(internet, extra_env), cwd=self.project,
                              capture_output=True, text=True, timeout=timeout,
                              input=input if input is not None else "",)

    def vibepit_popen(self, internet, args, extra_env=None, **kw):
        return subprocess.Popen(self.argv(args), env=self.env(internet, extra_env), cwd=self.project,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    def sessions_dir(self):
        return os.path.join(self.state, "vibepit", "sessions")

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def copy_base_from_docker():
    """On Podman, the base image Docker's e2e tests made (the same debootstrap bytes), saved
    from Docker and loaded here: seconds, where debootstrap takes minutes. Nothing when
    Docker has none or this engine has it already."""
    if ENGINE == "docker" or not docker_ready("docker"):
        return
    docker_env = engine_env("docker")
    refs = sh("docker", "images", "--filter", "label=dev.vibepit.image=base", "--format",
              "{{.Repository}}:{{.Tag}}", env=docker_env).stdout.split()
    if not refs or sh("docker", "image", "inspect", "localhost/" + refs[0], check=False,
                      env=engine_env(ENGINE)).returncode == 0:
        return
    save = subprocess.Popen(["docker", "save", refs[0]], stdout=subprocess.PIPE, env=docker_env)
    load = subprocess.run(["docker", "load", "-q"], stdin=save.stdout, capture_output=True,
                          text=True, timeout=600, env=engine_env(ENGINE))
    save.stdout.close()
    if save.wait(60) != 0 or load.returncode != 0:
        raise RuntimeError("copying %s from Docker failed: %s" % (refs[0], load.stderr))


def start_module():
    """What a test module with the default Debian image needs: an engine, the default images
    built as a root user would build them first (on a machine without debian:bookworm-slim
    that is debootstrap, which needs root; sessions running as TEST_UID then build that
    user's sandbox image FROM the base made here), and the fake internet, returned."""
    if not docker_ready():
        raise RuntimeError("no %s engine answers on %s (scripts/test.sh starts one)"
                           % (ENGINE, SOCKET))
    copy_base_from_docker()
    r = subprocess.run([os.path.join(BIN, "vibepit"), "image", "build", "--base", "debootstrap",
                        "--no-pull", "-q"], capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, VIBEPIT_TEST_LABEL="e2e"))
    if r.returncode != 0:
        raise RuntimeError("vibepit image build failed: " + r.stderr)
    return FakeInternet().start()


class ModuleInternet:
    """The fake internet a test module shares, started by its setUpModule and closed by its
    tearDownModule; it stands for the FakeInternet (its name, its namespace) in between:

        INTERNET = h.ModuleInternet()
        setUpModule, tearDownModule = INTERNET.start, INTERNET.close
    """

    def __init__(self):
        self.internet = None

    def start(self):
        self.internet = start_module()

    def close(self):
        if self.internet:
            self.internet.close()
            self.internet = None

    def __getattr__(self, name):
        if self.internet is None:
            raise AttributeError("the module's fake internet is not started: " + name)
        return getattr(self.internet, name)


def leaked_forward_rules():
    """FORWARD rules vibepit made for a session bridge that no longer exists (rootful
    Podman's internal networks get one; the tests run one at a time, so a rule whose bridge
    is gone outlived its session)."""
    iptables = shutil.which("iptables", path="/usr/sbin:/sbin")
    if os.geteuid() != 0 or not iptables:
        return []
    out = []
    for line in sh(iptables, "-w", "5", "-S", "FORWARD").stdout.splitlines():
        w = line.replace('"', "").split()
        if len(w) == 12 and w[2] == "-i" and w[9].startswith("vibepit-session:") \
                and not os.path.exists("/sys/class/net/" + w[3]):
            out.append("forward-rule:" + w[9])
    return out


def left_over(label_selector):
    """Containers and networks that still carry the label, and FORWARD rules of sessions
    that are gone."""
    out = []
    for kind in ("ps -a", "network ls"):
        r = sh("docker", *kind.split(), "-q", "--filter", "label=" + label_selector)
        out += [kind.split()[0] + ":" + x for x in r.stdout.split()]
    return out + leaked_forward_rules()


def reachable_copy(bin_path):
    """vibepit and vibepit-proxy copied where the test user can run them: a build tree under
    root's home (as in scripts/fresh-check.sh) is not. Removed at exit."""
    import atexit
    d = tempfile.mkdtemp(prefix="vpe2e-bin-")
    os.chmod(d, 0o755)
    for name in ("vibepit", "vibepit-proxy"):
        shutil.copy2(os.path.join(bin_path, name), os.path.join(d, name))
        os.chmod(os.path.join(d, name), 0o755)
    atexit.register(shutil.rmtree, d, True)
    return d


def wait_for_line(p, text, seconds=240):
    """Read a vibepit_popen process's stdout until a line holds `text`; the line, or what
    was last read when the process ended or the time ran out."""
    deadline = time.monotonic() + seconds
    line = ""
    while time.monotonic() < deadline and text not in line:
        line = p.stdout.readline()
        if p.poll() is not None:
            break
    return line


def release_only(test):
    """Marks a test that runs in the release build's e2e stage and is left out of the
    sanitizer builds' (it tests the launcher's behaviour, not its memory, and their stages
    keep their time); main() says how many were left out."""
    test.vibepit_release_only = True
    return test


def rootful_only(test):
    """Marks a test of vibepit run as root: on a user's rootless engine that is refused
    before anything is made (test_owner's RootlessOwnerTest asserts it), so the test is left
    out there, and main() says so."""
    test.vibepit_engines = ("docker", "podman")
    return test


def rootless_only(test):
    """Marks a test of what only a rootless engine does (main() leaves it out elsewhere)."""
    test.vibepit_engines = ("podman-rootless",)
    return test


def sanitized(bin_path):
    with open(os.path.join(bin_path, "vibepit"), "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__tsan_init" in data


def main():
    global BIN
    if os.geteuid() != 0:
        print("e2e tests need root (network namespaces, the Docker socket)")
        sys.exit(77)
    built = bin_dir()
    BIN = reachable_copy(built)
    import unittest

    class Loader(unittest.TestLoader):
        left_out = []

        other_engine = []

        def getTestCaseNames(self, case):
            names = super().getTestCaseNames(case)
            keep = [n for n in names
                    if ENGINE in getattr(getattr(case, n), "vibepit_engines", (ENGINE,))]
            Loader.other_engine += [n for n in names if n not in keep]
            names = keep
            if not sanitized(built):
                return names
            keep = [n for n in names if not getattr(getattr(case, n), "vibepit_release_only", False)]
            Loader.left_out += [n for n in names if n not in keep]
            return keep

    program = unittest.main(verbosity=2, testLoader=Loader(), exit=False)
    if Loader.left_out:
        print("e2e: %d release-only tests left out of this sanitizer build: %s"
              % (len(Loader.left_out), " ".join(Loader.left_out)))
    if Loader.other_engine:
        print("e2e: %d tests of another engine's behaviour left out on %s: %s"
              % (len(Loader.other_engine), ENGINE, " ".join(Loader.other_engine)))
    sys.exit(0 if program.result.wasSuccessful() else 1)
