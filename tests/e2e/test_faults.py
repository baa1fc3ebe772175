"""vibepit run under faults: SIGTERM and SIGKILL at each step of the set-up, and the proxy
stopped under a running session. Uses a tiny FROM scratch busybox image for speed."""

import json
import os
import select
import signal
import subprocess
import tempfile
import time
import unittest

from tests.e2e import e2e_harness as h

INTERNET = None
BUSYBOX = "vibepit-e2e-busybox:%d" % os.getpid()


def setUpModule():
    global INTERNET
    if not h.docker_ready():
        raise RuntimeError("no Docker engine answers on /var/run/docker.sock "
                           "(scripts/test.sh starts one)")
    busybox = h.need("busybox")
    with tempfile.TemporaryDirectory() as ctx:
        with open(busybox, "rb") as src, open(os.path.join(ctx, "busybox"), "wb") as dst:
            dst.write(src.read())
        os.chmod(os.path.join(ctx, "busybox"), 0o755)
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write("FROM scratch\nCOPY busybox /bin/busybox\n"
                    'RUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["/bin/sh"]\n')
        h.sh("docker", "build", "-q", "--label", "%s=%d" % (h.TEST_LABEL, os.getpid()),
             "-t", BUSYBOX, ctx, env=dict(os.environ, DOCKER_BUILDKIT="0"))
    INTERNET = h.FakeInternet().start()


def tearDownModule():
    if INTERNET:
        INTERNET.close()
    h.sh("docker", "image", "rm", "-f", BUSYBOX, check=False)


def read_until(proc, text, timeout):
    """Read proc's stderr until `text` appears; returns what was read."""
    seen = ""
    deadline = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while text not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError("no %r from vibepit run; it said: %s" % (text, seen))
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096).decode(errors="replace")
            if not chunk:
                raise AssertionError("vibepit run closed stderr; it said: %s" % seen)
            seen += chunk
    return seen


class FaultTest(unittest.TestCase):
    def setUp(self):
        self.ws = h.Workspace()

    def tearDown(self):
        self.ws.vibepit(INTERNET, ["down"])
        self.ws.close()

    def start(self, pause=None, command=("sleep", "300")):
        extra = {"VIBEPIT_TEST_PAUSE": pause} if pause else None
        return self.ws.vibepit_popen(INTERNET, ["run", "-T", "--image", BUSYBOX, "--upstream-dns",
                                                h.DNS_ADDR, "--"] + list(command), extra_env=extra)

    def project_label(self):
        import hashlib
        return "dev.vibepit.project=" + hashlib.sha256(
            os.path.realpath(self.ws.project).encode()).hexdigest()[:16]

    def created(self):
        return h.left_over(self.project_label())

    def test_sigterm_at_each_step_leaves_nothing(self):
        for step in ("network", "proxy", "sandbox"):
            with self.subTest(step=step):
                p = self.start(pause=step)
                read_until(p, "test pause after " + step, 120)
                self.assertNotEqual(self.created(), [])  # something exists to clean up
                p.send_signal(signal.SIGTERM)
                self.assertEqual(p.wait(60), 128 + signal.SIGTERM)
                p.stdout.close()
                p.stderr.close()
                self.assertEqual(self.created(), [])

    def test_sigkill_at_each_step_then_prune_leaves_nothing(self):
        for step in ("network", "proxy", "sandbox"):
            with self.subTest(step=step):
                p = self.start(pause=step)
                read_until(p, "test pause after " + step, 120)
                p.kill()
                p.wait(30)
                p.stdout.close()
                p.stderr.close()
                self.assertNotEqual(self.created(), [])  # a SIGKILL cleans nothing up
                r = self.ws.vibepit(INTERNET, ["prune"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(self.created(), [])

    def test_sigterm_while_attached(self):
        p = self.start()
        self.wait_running(p)
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(60), 128 + signal.SIGTERM)
        p.stdout.close()
        p.stderr.close()
        self.assertEqual(self.created(), [])

    def running(self, role):
        return h.sh("docker", "ps", "-q", "--filter", "label=" + self.project_label(),
                    "--filter", "label=dev.vibepit.role=" + role).stdout.split()

    def wait_running(self, p):
        read_until(p, "Creating sandbox", 120)
        self.assertTrue(h.wait_until(lambda: self.running("sandbox"), timeout=30, interval=0.1),
                        "the sandbox never ran")

    def test_stopped_proxy_fails_closed_and_status_says_so(self):
        p = self.start()
        self.wait_running(p)
        sessions = os.listdir(self.ws.sessions_dir())
        with open(os.path.join(self.ws.sessions_dir(), sessions[0], "proxy.json")) as f:
            proxy_ip = json.load(f)["proxy-listen"][0].rsplit(":", 1)[0]
        probe = ("nc -w 3 %s 3128 </dev/null && echo PROXY-OPEN; "
                 "nc -w 3 198.51.100.10 80 </dev/null && echo DIRECT-OPEN; echo probed" % proxy_ip)
        r = self.ws.vibepit(INTERNET, ["run", "-q", "-T", "--", "sh", "-c", probe])
        self.assertIn("PROXY-OPEN", r.stdout, r.stderr)   # the probe itself works
        proxy = self.running("proxy")[0]
        h.sh("docker", "stop", "-t", "2", proxy)   # a fault from outside, as a crash would be
        r = self.ws.vibepit(INTERNET, ["run", "-q", "-T", "--", "sh", "-c", probe])
        self.assertIn("probed", r.stdout, r.stderr)
        self.assertNotIn("PROXY-OPEN", r.stdout)
        self.assertNotIn("DIRECT-OPEN", r.stdout)
        r = self.ws.vibepit(INTERNET, ["status"])
        self.assertIn("proxy exited: the sandbox has no egress", r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"^engine: (docker|podman) \S+ \(API 1\.\d+\) at /\S+\n")
        p.send_signal(signal.SIGTERM)
        p.wait(60)
        p.stdout.close()
        p.stderr.close()
        self.assertEqual(self.created(), [])

    @h.release_only
    def test_a_launcher_in_another_namespace_still_blocks_the_engine_host(self):
        # vibepit in a network namespace of its own (as in a container, or beside a remote or
        # rootless engine) sees none of the host's interfaces; the proxy must still refuse the
        # engine host's addresses, which the engine's network gateways are.
        argv = ["unshare", "--net", "--"] + self.ws.argv(
            ["run", "-q", "-T", "--image", BUSYBOX, "--upstream-dns", h.DNS_ADDR, "--", "true"])
        r = subprocess.run(argv, env=self.ws.env(INTERNET), cwd=self.ws.project, text=True,
                           capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        (session,) = os.listdir(self.ws.sessions_dir())
        with open(os.path.join(self.ws.sessions_dir(), session, "proxy.json")) as f:
            blocked = json.load(f)["block-cidr"]
        self.assertIn(h.GATEWAY + "/32", blocked)   # the fake internet's bridge, on the host
        self.assertEqual(self.created(), [])


if __name__ == "__main__":
    h.main()
