"""Whose files: the agent runs as the project's owner. vibepit run as root (sudo, a root CI
runner) on a project owned by uid 4321 runs the agent as 4321, so every file it makes is
theirs; a root-owned project is refused before anything is made; --user chooses, and never
root (agent_user.hpp). vibepit run by an ordinary user running the agent as that user is
test_session.py's and test_git_shield.py's case (uid 4242). A real Docker engine."""

import hashlib
import os
import subprocess
import unittest

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
OWNER = 4321
DNS = ["--upstream-dns", h.DNS_ADDR]


def chown_tree(top, uid, gid):
    for root, dirs, files in os.walk(top):
        for n in dirs + files + ["."]:
            os.lchown(os.path.join(root, n), uid, gid)


def engine_objects():
    """Every container, network, volume and image the e2e tests' label marks."""
    out = set()
    for kind in ("ps -a", "network ls", "volume ls", "images"):
        r = subprocess.run(["docker"] + kind.split() + ["-q", "--filter", "label=dev.vibepit.test"],
                           capture_output=True, text=True, check=True)
        out |= {kind.split()[0] + ":" + x for x in r.stdout.split()}
    return out


class OwnerTest(unittest.TestCase):
    """vibepit as root; the project as its owner leaves it."""

    def setUp(self):
        self.ws = h.Workspace(uid=0)
        self.addCleanup(self.ws.close)
        chown_tree(self.ws.project, OWNER, OWNER)

    def left_over(self):
        project = hashlib.sha256(os.path.realpath(self.ws.project).encode()).hexdigest()[:16]
        return h.left_over("dev.vibepit.project=" + project)

    def run_job(self, cmd, args=(), expect=0):
        job = 'id -u; id -g; touch made-here; mkdir -p d; touch d/f; touch "$HOME/home-is-mine"'
        r = self.ws.vibepit(INTERNET, cmd + ["-q"] + DNS + list(args) + ["--", "bash", "-c", job],
                            timeout=300)
        self.assertEqual(r.returncode, expect, "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr))
        self.assertEqual(self.left_over(), [], "the session was not removed")
        return r

    def assert_owned(self, uid, gid):
        for rel in ("made-here", "d", "d/f"):
            st = os.lstat(os.path.join(self.ws.project, rel))
            self.assertEqual((st.st_uid, st.st_gid), (uid, gid), rel)

    def test_run_as_root_writes_as_the_owner(self):
        r = self.run_job(["run", "-T"])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), str(OWNER)], r.stderr)
        self.assert_owned(OWNER, OWNER)

    def test_ci_as_root_writes_as_the_owner(self):
        r = self.run_job(["ci"])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), str(OWNER)], r.stderr)
        self.assert_owned(OWNER, OWNER)

    def test_user_option(self):
        # The project's owner, named: the same as the default, and the project's group kept.
        chown_tree(self.ws.project, OWNER, 4322)
        r = self.run_job(["run", "-T"], ["--user", "%d:4322" % OWNER])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), "4322"], r.stderr)
        self.assert_owned(OWNER, 4322)

    def test_programs_find_the_user(self):
        # The default image has the agent's uid and gid as `code`, also for a --user whose
        # GID is not its UID: what looks the user or the group up finds them, the home in
        # /etc/passwd is the one HOME names, and the tools an agent uses work as that user
        # (git commits with the image's identity; npm, pip --user and ssh-keygen, offline).
        chown_tree(self.ws.project, OWNER, 4322)
        job = r"""set -e
id -un; whoami; id -gn; getent passwd "$(id -u)" | cut -d: -f6; echo "$HOME"
cd /tmp && git init -q r && cd r && git commit -q --allow-empty -m x
git log -1 --format='%an|%ae'
ssh-keygen -q -t ed25519 -N '' -f /tmp/id_t && ssh-keygen -l -f /tmp/id_t.pub | cut -d' ' -f3
mkdir /tmp/dep /tmp/app && echo '{"name":"dep","version":"1.0.0"}' > /tmp/dep/package.json
cd /tmp/app && npm init -y >/dev/null && npm install -s --offline --no-audit --no-fund /tmp/dep
node -p 'require("dep/package.json").name'
mkdir /tmp/pkg && echo 'X = 42' > /tmp/pkg/vpdemo.py
printf 'from setuptools import setup\nsetup(name="vpdemo", version="1", py_modules=["vpdemo"])\n' \
  > /tmp/pkg/setup.py
python3 -m pip install -q --user --no-index --no-build-isolation --break-system-packages \
  /tmp/pkg 2>/dev/null
cd / && python3 -c 'import vpdemo; print(vpdemo.X)'
stat -c %u:%g "$HOME" "$HOME/.local/lib" "$HOME/.npm"
"""
        r = self.ws.vibepit(INTERNET, ["run", "-T", "-q", "--user", "%d:4322" % OWNER] + DNS +
                            ["--", "bash", "-c", job], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        owned = "%d:4322" % OWNER
        self.assertEqual(r.stdout.splitlines(),
                         ["code"] * 3 + ["/home/code"] * 2 +
                         ["vibepit agent|code@vibepit.invalid", "code@vibepit",  # ssh-keygen -l
                          "dep", "42", owned, owned, owned],
                         r.stderr)

    def test_a_new_owner_gets_a_home_of_its_own(self):
        # The project's home is kept between sessions; it was filled for 4321, and 4322, who
        # owns the project now, could not write it.
        self.run_job(["run", "-T"])
        chown_tree(self.ws.project, OWNER + 1, OWNER + 1)
        r = self.run_job(["run", "-T"])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER + 1), str(OWNER + 1)], r.stderr)
        self.assert_owned(OWNER + 1, OWNER + 1)

    def test_root_owned_project_is_refused_and_nothing_is_made(self):
        chown_tree(self.ws.project, 0, 0)
        before = engine_objects()
        for cmd in (["run", "-T"], ["ci"]):
            r = self.ws.vibepit(INTERNET, cmd + ["-q"] + DNS + ["--", "touch", "made-here"])
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("is owned by 0:0", r.stderr)
            self.assertIn("chown -R UID:GID " + os.path.realpath(self.ws.project), r.stderr)
            self.assertIn("--user UID:GID", r.stderr)
            self.assertEqual(engine_objects(), before, " ".join(cmd) + " left something")
        self.assertFalse(os.path.exists(os.path.join(self.ws.project, "made-here")))

    def test_user_zero_is_refused(self):
        before = engine_objects()
        for user in ("0", "0:0", "%d:0" % OWNER):
            r = self.ws.vibepit(INTERNET, ["run", "-T", "-q", "--user", user] + DNS + ["--", "true"])
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("never runs as root", r.stderr)
        self.assertEqual(engine_objects(), before)
        r = self.ws.vibepit(INTERNET, ["run", "-T", "--user", "alice", "--", "true"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("expected UID or UID:GID", r.stderr)


if __name__ == "__main__":
    h.main()
