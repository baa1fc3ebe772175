"""Whose files: the agent runs as the project's owner. vibepit run as root (sudo, a root CI
runner) on a project owned by uid 4321 runs the agent as 4321, so every file it makes is
theirs; a root-owned project is refused before anything is made; --user chooses, and never
root (agent_user.hpp). vibepit run by an ordinary user running the agent as that user is
test_session.py's and test_git_shield.py's case (uid 4242). On rootless Podman, vibepit as
root is refused and the user's own files are checked instead (RootlessOwnerTest)."""

import hashlib
import os
import subprocess
import unittest

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
OWNER = 4321
DNS = ["--upstream-dns", h.DNS_ADDR]


# What looks the agent up, and the tools an agent uses, as that user (offline): the default
# image has the agent's uid and gid as `code`, also for a --user whose GID is not its UID.
PROGRAMS = r"""set -e
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


def programs_said(owned):
    """What PROGRAMS prints: the names, the home in /etc/passwd and HOME, git's identity,
    ssh-keygen's comment, npm's and pip's packages, and the owner of the home's files."""
    return (["code"] * 3 + ["/home/code"] * 2 +
            ["vibepit agent|code@vibepit.invalid", "code@vibepit", "dep", "42"] + [owned] * 3)


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

    @h.rootful_only
    def test_run_as_root_writes_as_the_owner(self):
        r = self.run_job(["run", "-T"])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), str(OWNER)], r.stderr)
        self.assert_owned(OWNER, OWNER)

    @h.rootful_only
    def test_ci_as_root_writes_as_the_owner(self):
        r = self.run_job(["ci"])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), str(OWNER)], r.stderr)
        self.assert_owned(OWNER, OWNER)

    @h.rootful_only
    def test_user_option(self):
        # The project's owner, named: the same as the default, and the project's group kept.
        chown_tree(self.ws.project, OWNER, 4322)
        r = self.run_job(["run", "-T"], ["--user", "%d:4322" % OWNER])
        self.assertEqual(r.stdout.split()[:2], [str(OWNER), "4322"], r.stderr)
        self.assert_owned(OWNER, 4322)

    @h.rootful_only
    def test_programs_find_the_user(self):
        chown_tree(self.ws.project, OWNER, 4322)
        r = self.ws.vibepit(INTERNET, ["run", "-T", "-q", "--user", "%d:4322" % OWNER] + DNS +
                            ["--", "bash", "-c", PROGRAMS], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines(), programs_said("%d:4322" % OWNER), r.stderr)

    @h.rootful_only
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


class RootlessOwnerTest(unittest.TestCase):
    """On a user's rootless Podman the agent is that user, mapped to itself: vibepit run by
    the user (TEST_UID) writes as the user, and an agent that would be anyone else (vibepit
    as root, --user for another uid) is refused before anything is made."""

    @h.rootless_only
    def test_root_on_a_users_rootless_engine_is_refused_and_nothing_is_made(self):
        ws = h.Workspace(uid=0)
        self.addCleanup(ws.close)
        chown_tree(ws.project, OWNER, OWNER)
        before = engine_objects()
        for cmd in (["run", "-T"], ["ci"]):
            r = ws.vibepit(INTERNET, cmd + ["-q"] + DNS + ["--", "touch", "made-here"])
            self.assertEqual(r.returncode, 125, r.stderr)
            self.assertIn("can run the agent as its own user only", r.stderr)
            self.assertIn("run vibepit as uid %d" % h.TEST_UID, r.stderr)
            self.assertEqual(engine_objects(), before, " ".join(cmd) + " left something")
        self.assertFalse(os.path.exists(os.path.join(ws.project, "made-here")))

    @h.rootless_only
    def test_the_engines_user_writes_as_itself_and_programs_find_it(self):
        ws = h.Workspace()
        self.addCleanup(ws.close)
        r = ws.vibepit(INTERNET, ["run", "-T", "-q", "--user", str(h.TEST_UID)] + DNS +
                       ["--", "bash", "-c", "touch made-here && " + PROGRAMS], timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        owned = "%d:%d" % (h.TEST_UID, h.TEST_UID)
        self.assertEqual(r.stdout.splitlines(), programs_said(owned), r.stderr)
        st = os.lstat(os.path.join(ws.project, "made-here"))
        self.assertEqual((st.st_uid, st.st_gid), (h.TEST_UID, h.TEST_UID))
        r = ws.vibepit(INTERNET, ["run", "-T", "-q", "--user", str(OWNER)] + DNS + ["--", "true"])
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("can run the agent only as that uid", r.stderr)


if __name__ == "__main__":
    h.main()
