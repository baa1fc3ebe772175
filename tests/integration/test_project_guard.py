"""The project's filter (launcher/guard/include/vibepit/launcher/guard/project_guard.hpp) on its own:
`vibepit __project-guard` started as root mounts a view of a directory and serves it as an
ordinary user; what that user does through the view is checked against the real directory.
No Docker and no network: root, /dev/fuse and setpriv."""

import os
import shutil
import subprocess
import tempfile
import time
import unittest

from tests.integration.harness import base
from tests.integration.harness.tools import need
from tests.integration.harness.wait import wait_until

UID = 4243  # the "agent": no such user is needed, the filter only takes the number


class ProjectGuardTest(unittest.TestCase):

    def setUp(self):
        if not os.path.exists("/dev/fuse"):
            self.fail("no /dev/fuse: the project's filter needs FUSE")
        self.tmp = tempfile.mkdtemp(prefix="vp-guard-")
        os.chmod(self.tmp, 0o755)
        self.real = os.path.join(self.tmp, "project")
        self.view = os.path.join(self.tmp, "view")
        self.log = os.path.join(self.tmp, "guard.log")
        os.makedirs(os.path.join(self.real, "vendor/lib/.git/hooks"))
        with open(os.path.join(self.real, "vendor/lib/.git/config"), "w") as f:
            f.write("[core]\n")
        with open(os.path.join(self.real, "README"), "w") as f:
            f.write("hello\n")
        for root, dirs, files in os.walk(self.real):
            for n in dirs + files + ["."]:
                os.lchown(os.path.join(root, n), UID, UID)
        os.makedirs(self.view)
        self.sid = "guardtest%d" % os.getpid()
        r = subprocess.run([os.path.join(base.BIN_DIR, "vibepit"), "__project-guard", self.real,
                            self.view, self.sid, str(UID), str(UID), self.log],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.addCleanup(self.cleanup)

    def cleanup(self):
        subprocess.run(["umount", "-l", self.view], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def server_pids(self):
        pids = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"__project-guard" in argv and self.view.encode() in argv:
                pids.append(int(p))
        return pids

    def sh(self, script, timeout=60):
        """bash -c SCRIPT in the view, as the agent's user."""
        return subprocess.run([need("setpriv"), "--reuid", str(UID), "--regid", str(UID),
                               "--clear-groups", "--", "bash", "-c", script], cwd=self.view,
                              capture_output=True, text=True, timeout=timeout,
                              env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"})

    def real_path(self, rel):
        return os.path.join(self.real, rel)

    def test_ordinary_work_passes_through_as_the_agents_user(self):
        r = self.sh("set -e\n"
                    "mkdir -p src/deep && echo one > src/deep/a.txt && echo two >> src/deep/a.txt\n"
                    "mv src/deep/a.txt src/b.txt && ln src/b.txt src/c.txt && ln -s b.txt src/d\n"
                    "chmod 600 src/b.txt && touch -d 2020-01-01 src/c.txt && truncate -s 3 README\n"
                    "mkfifo src/fifo && rm src/fifo\n"
                    # a file written and read after its name is gone (what compilers do)
                    "python3 -c \"import os; f = open('src/tmp', 'w+'); os.unlink('src/tmp'); "
                    "f.write('kept'); f.flush(); f.seek(0); print(f.read())\"\n"
                    "ls -a src | tr '\\n' ' '\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kept\n", r.stdout)
        self.assertIn("b.txt c.txt d deep", r.stdout)
        with open(self.real_path("src/b.txt")) as f:
            self.assertEqual(f.read(), "one\ntwo\n")
        st = os.stat(self.real_path("src/b.txt"))
        self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o777, st.st_nlink), (UID, UID, 0o600, 2))
        self.assertEqual(os.readlink(self.real_path("src/d")), "b.txt")
        self.assertEqual(os.path.getsize(self.real_path("README")), 3)
        self.assertEqual(os.stat(self.real_path("src/c.txt")).st_mtime, time.mktime((2020, 1, 1, 0, 0, 0, 0, 0, -1)))
        self.assertFalse(any(n.startswith(".fuse_hidden") for n in os.listdir(self.real_path("src"))))

        # Inode numbers are the real ones (git's index keeps them).
        self.assertEqual(os.stat(os.path.join(self.view, "src/b.txt")).st_ino,
                         os.stat(self.real_path("src/b.txt")).st_ino)
        # The server runs as the agent's user, not as root.
        pids = self.server_pids()
        self.assertEqual(len(pids), 1)
        with open("/proc/%d/status" % pids[0]) as f:
            uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
        self.assertEqual(set(uids), {str(UID)})

    def test_modes_follow_the_agents_umask(self):
        r = self.sh("umask 002 && mkdir shared && touch shared/f && umask 077 && touch own")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.stat(self.real_path("shared")).st_mode & 0o777, 0o775)
        self.assertEqual(os.stat(self.real_path("shared/f")).st_mode & 0o777, 0o664)
        self.assertEqual(os.stat(self.real_path("own")).st_mode & 0o777, 0o600)

    def test_no_git_repository_can_be_made_or_changed(self):
        attempts = [
            "mkdir sub && git init -q sub",
            "mkdir -p x && mkdir x/.git",
            "mkdir -p x && touch x/.GIT",
            "mkdir -p x && ln -s ../vendor/lib/.git x/.git",
            "mkdir -p x/y && mv x/y x/.git",
            "mkdir -p x && touch x/f && ln x/f x/.Git",
            "mkdir -p b && git init -q --bare b",
            "mkdir -p c/objects c/refs && echo 'ref: refs/heads/main' > c/HEAD",
            "mkdir -p d && echo 'ref: refs/heads/main' > d/HEAD && echo ../b > d/commondir",
            "echo '[core] fsmonitor = touch /tmp/x' >> vendor/lib/.git/config",
            "printf '#!/bin/sh\\n' > vendor/lib/.git/hooks/post-checkout",
            "mv vendor/lib/.git vendor/lib/git-moved",
            "rm -rf vendor/lib/.git",
            "ln vendor/lib/.git/config cfg",
        ]
        for a in attempts:
            r = self.sh(a)
            self.assertNotEqual(r.returncode, 0, a)
        for rel in ("sub/.git", "x/.git", "x/.GIT", "x/.Git"):
            self.assertFalse(os.path.lexists(self.real_path(rel)), rel)
        for d in ("b", "c"):
            names = set(os.listdir(self.real_path(d)))
            self.assertFalse({"HEAD", "objects", "refs"} <= names, (d, names))
        self.assertFalse({"HEAD", "commondir"} <= set(os.listdir(self.real_path("d"))))
        with open(self.real_path("vendor/lib/.git/config")) as f:
            self.assertEqual(f.read(), "[core]\n")
        self.assertEqual(os.listdir(self.real_path("vendor/lib/.git/hooks")), [])
        with open(self.log) as f:
            log = f.read()
        self.assertIn("mkdir sub/.git: refused, an entry named .git", log)
        self.assertIn("it would make a git directory", log)
        self.assertIn("vendor/lib/.git/config: refused, a change inside a git directory", log)

    def test_racing_creators_never_complete_a_git_directory(self):
        # Two writers at once, one making HEAD and one objects and refs, in 200 directories:
        # the check and the creation are one step, so never all three.
        r = self.sh("for i in $(seq 200); do mkdir r$i; done\n"
                    "(for i in $(seq 200); do : > r$i/HEAD; done) 2>/dev/null &\n"
                    "(for i in $(seq 200); do mkdir r$i/objects r$i/refs; done) 2>/dev/null &\n"
                    "wait\n", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        whole = [d for d in os.listdir(self.real) if d.startswith("r") and
                 {"HEAD", "objects", "refs"} <= set(os.listdir(self.real_path(d)))]
        self.assertEqual(whole, [])

    def test_names_in_the_log_are_escaped(self):
        self.sh("mkdir -p $'evil\\e]0;title\\a' && mkdir $'evil\\e]0;title\\a/.git'")
        with open(self.log, "rb") as f:
            log = f.read()
        self.assertNotIn(b"\x1b", log)
        self.assertIn(b"evil\\x1b]0;title\\x07/.git", log)

    def test_unmounting_ends_the_server(self):
        pids = self.server_pids()
        self.assertEqual(len(pids), 1)
        subprocess.run(["umount", "-l", self.view], check=True)
        self.assertTrue(wait_until(lambda: not os.path.exists("/proc/%d" % pids[0])),
                        "the server outlived its mount")


if __name__ == "__main__":
    base.main(needs_proxy=False)
