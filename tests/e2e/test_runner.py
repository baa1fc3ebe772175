"""vibepit ci where CI runners run it: in a GitLab Docker-executor job container, as
docs/ci.md's recipe sets the runner up (the host's Docker socket; /dev/fuse and
CAP_SYS_ADMIN for the project's filter; the builds directory and the state directory on
host paths mounted at the same paths, the state directory with rshared propagation, which
also carries the proxy's control socket). Here both host paths are in a temporary directory
rather than /builds and /var/lib/vibepit-ci.
The job checks the project out as root, as the executor does: vibepit refuses that
checkout, and runs the job as the user it is handed to. Docker only: the recipe is for
Docker's executor."""

import hashlib
import os
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ET

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
JOB_IMAGE = "vibepit-e2e-job:%d" % os.getpid()


def setUpModule():
    if h.ENGINE != "docker":
        raise RuntimeError("the GitLab Docker-executor recipe is for Docker (e2e label only)")
    INTERNET.start()
    build_job_image()


def tearDownModule():
    h.sh("docker", "image", "rm", "-f", JOB_IMAGE, check=False)
    INTERNET.close()


def build_job_image():
    """What a team's CI image would be: Debian 12 (vibepit's own base image, with git and
    bash) and vibepit installed."""
    base = h.sh("docker", "images", "-q", "--filter", "label=dev.vibepit.image=base").stdout.split()
    if not base:
        raise RuntimeError("no vibepit base image (start_module builds it)")
    with tempfile.TemporaryDirectory() as ctx:
        root = os.path.join(ctx, "rootfs")
        for name in ("vibepit", "vibepit-proxy"):
            src = os.path.join(h.BIN, name)
            files = [(src, "/usr/local/bin/" + name)]
            files += [(lib, lib) for lib in h.shared_objects(src)]
            for what, where in files:
                dst = root + where
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(what, dst)  # the file a symlink names, as the loader finds it
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write("FROM %s\nCOPY rootfs/ /\n" % base[0])
        h.sh("docker", "build", "-q", "--label", "%s=%d" % (h.TEST_LABEL, os.getpid()),
             "-t", JOB_IMAGE, ctx, env=dict(os.environ, DOCKER_BUILDKIT="0"), timeout=300)


class SharedDir:
    """A host directory mounted on itself with shared propagation, as / is where systemd
    runs (docker run refuses rshared on a path whose mount is private)."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="vpe2e-runner-")
        h.sh("mount", "--bind", self.path, self.path)
        h.sh("mount", "--make-shared", self.path)

    def mounts_under(self):
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f
                    if line.split()[4].startswith(self.path + "/")]

    def close(self):
        h.sh("umount", "-l", self.path, check=False)
        shutil.rmtree(self.path, ignore_errors=True)


class GitLabDockerExecutorTest(unittest.TestCase):
    def job(self, script):
        """The job container as the recipe's runner config.toml makes it, running `script`."""
        state, builds = self.path("state"), self.path("builds")
        argv = ["docker", "run", "--rm", "--label", "%s=%d" % (h.TEST_LABEL, os.getpid()),
                "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN",
                "--security-opt", "apparmor=unconfined",
                "-v", "/var/run/docker.sock:/var/run/docker.sock",
                "-v", "%s:%s" % (builds, builds),
                "-v", "%s:%s:rshared" % (state, state),
                "-e", "XDG_STATE_HOME=" + state,
                "-e", "VIBEPIT_TEST_LABEL=e2e",
                "-e", "VIBEPIT_TEST_EGRESS_NETWORK=" + INTERNET.name,
                JOB_IMAGE, "bash", "-c", script]
        return subprocess.run(argv, capture_output=True, text=True, timeout=600)

    def setUp(self):
        self.shared = SharedDir()
        self.addCleanup(self.shared.close)
        for d in ("state", "builds"):
            os.makedirs(self.path(d))

    def path(self, name):
        return os.path.join(self.shared.path, name)

    def test_the_recipe_refuses_the_root_checkout_and_runs_as_the_user_it_is_given_to(self):
        gate = ("vibepit ci -q --user 4321:4321 --upstream-dns %s -a a.pkg.test:443 "
                "--report egress.xml --format junit" % h.DNS_ADDR)
        job = ("connect() { curl -s -o /dev/null --max-time 5 -w '%{http_connect}' -p "
               "\"http://$1/\" || true; }; echo built > out.txt; "
               "echo \"allowed $(connect a.pkg.test:443)\"; "
               "echo \"unlisted $(connect other.test:443)\"")
        checkout = self.path("builds/acme/app")
        script = "\n".join([
            # what the executor does: a checkout, as root
            "set -u",
            "mkdir -p %s && cd %s" % (checkout, checkout),
            "git init -q . && echo '# app' > README.md",
            "vibepit ci -q --upstream-dns %s -- true; echo \"root-owned=$?\"" % h.DNS_ADDR,
            # the recipe's script
            "chown -R 4321:4321 %s" % checkout,
            "%s -- bash -c %s; echo \"gated=$?\"" % (gate, sh_quote(job)),
            "stat -c 'out.txt %u:%g' out.txt",
            "cat egress.xml",
        ])
        r = self.job(script)
        said = "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
        self.assertEqual(r.returncode, 0, said)
        self.assertIn("root-owned=125", r.stdout, said)
        self.assertIn("owned by 0:0", r.stderr, said)
        self.assertIn("gated=0", r.stdout, said)
        self.assertIn("allowed 200\nunlisted 403\n", r.stdout, said)
        self.assertIn("out.txt 4321:4321", r.stdout, said)
        xml = r.stdout[r.stdout.index("<?xml"):]
        cases = {c.get("name"): c for c in ET.fromstring(xml).iter("testcase")}
        self.assertEqual(set(cases), {"a.pkg.test:443", "other.test:443"})
        self.assertIsNotNone(cases["other.test:443"].find("failure"))
        # Nothing of the session is left: on the engine, and no filter still mounted.
        project = hashlib.sha256(checkout.encode()).hexdigest()[:16]
        self.assertEqual(h.left_over("dev.vibepit.project=" + project), [])
        self.assertEqual(self.shared.mounts_under(), [])


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    h.main()
