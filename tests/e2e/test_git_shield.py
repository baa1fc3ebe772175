"""What the agent writes into git never runs on the host: the project's .git is a copy in the
sandbox (git_shield.hpp), and the project itself is seen through a filter that refuses any
git repository the agent tries to make in it (project_guard.hpp). A real Docker engine, the
default sandbox image, vibepit run by a non-root user (uid 4242)."""

import os
import shutil
import subprocess
import tempfile
import unittest

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close


class GitShieldTest(unittest.TestCase):
    """What the agent plants in git config and hooks, in the project's repository and in
    repositories it tries to make below it, never runs when the project's owner uses git on
    the host, during the session or after it; the agent's commits come back."""

    def setUp(self):
        self.ws = h.Workspace()
        self.addCleanup(self.ws.close)
        self.mark = "/tmp/vibepit-e2e-mark-%d-" % os.getpid()
        self.addCleanup(self.remove_marks)
        os.rmdir(os.path.join(self.ws.project, ".git"))
        self.git("init", "-q", "-b", "main")
        with open(os.path.join(self.ws.project, "README"), "w") as f:
            f.write("hello\n")
        os.chown(os.path.join(self.ws.project, "README"), self.ws.uid, self.ws.uid)
        self.git("add", "README")
        self.git("-c", "user.name=owner", "-c", "user.email=o@example.test", "commit", "-qm", "start")
        # Two repositories embedded before the session: one the agent goes for, one it leaves.
        for sub in ("vendor/lib", "vendor/keep"):
            self.git("init", "-q", sub)

    def remove_marks(self):
        for name in os.listdir("/tmp"):
            if ("/tmp/" + name).startswith(self.mark):
                os.unlink("/tmp/" + name)

    def marks(self):
        return sorted(n for n in os.listdir("/tmp") if ("/tmp/" + n).startswith(self.mark))

    def git(self, *args, cwd=None):
        """git on the host, as the project's owner, as their shell prompt would run it."""
        return subprocess.run(["setpriv", "--reuid", str(self.ws.uid), "--regid", str(self.ws.uid),
                               "--clear-groups", "--", "git"] + list(args),
                              cwd=cwd or self.ws.project, capture_output=True, text=True,
                              timeout=60, env={"HOME": self.ws.home, "PATH": os.environ["PATH"]})

    def start_job(self, job, says):
        """vibepit run -- bash -c JOB, once the job has printed `says`."""
        p = self.ws.vibepit_popen(INTERNET, ["run", "-q", "-T", "--upstream-dns", h.DNS_ADDR,
                                             "--", "bash", "-c", job])
        line = h.wait_for_line(p, says)
        self.assertIn(says, line, p.stderr.read() if p.poll() is not None else "")
        return p

    def plant(self, repo):
        """Bash, run in the sandbox: fsmonitor, hooksPath and a post-checkout hook in `repo`,
        each of which would leave a mark in the host's /tmp if the host ran it. Prints
        `planted REPO` only if every step worked."""
        m = self.mark + repo.replace("/", "_") + "-"
        return ("(cd %s && git config core.fsmonitor 'touch %sfsmonitor' && "
                "mkdir -p .hooks && printf '#!/bin/sh\\ntouch %shookspath\\n' > .hooks/post-checkout && "
                "chmod +x .hooks/post-checkout && git config core.hooksPath \"$PWD/.hooks\" && "
                "mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch %shook\\n' > .git/hooks/post-checkout && "
                "chmod +x .git/hooks/post-checkout && echo planted %s) 2>/dev/null\n"
                % (repo, m, m, m, repo))

    @h.release_only
    def test_planted_config_and_hooks_never_run_on_the_host(self):
        bad = self.mark + "bare-fsmonitor"
        job = ("set -e\n"
               "echo agent > work.txt && git add work.txt\n"
               "git -c user.name=agent -c user.email=a@example.test commit -qm agent\n"
               "git branch agent-branch\n" + self.plant(".") +
               "set +e\n"
               # Every way to a repository below the project: each must fail.
               "mkdir -p sub bare\n"
               "git init -q sub 2>/dev/null && echo made sub/.git\n"
               "git init -q /tmp/r && mv /tmp/r/.git sub/.git 2>/dev/null && echo moved sub/.git\n"
               "mkdir sub/d && mv sub/d sub/.GIT 2>/dev/null && echo renamed to sub/.GIT\n"
               "ln -s ../vendor/keep/.git sub/.git 2>/dev/null && echo linked sub/.git\n"
               "git init -q --bare bare 2>/dev/null && echo made a bare repository\n"
               "git --git-dir=bare config core.bare false 2>/dev/null && "
               "git --git-dir=bare config core.worktree \"$PWD/bare\" && "
               "git --git-dir=bare config core.fsmonitor 'touch %s' && echo planted bare\n" % bad +
               self.plant("sub") + self.plant("vendor/lib") +
               "echo tried\n"
               "for i in $(seq 600); do [ -e STOP ] && exit 0; sleep 0.2; done; exit 9\n")
        # What the attempts print comes at the end, after "tried" has been waited for.
        job = "exec 3>&1 >/tmp/said\ntrap 'cat /tmp/said >&3' EXIT\n" + job.replace(
            "echo tried\n", "echo tried >&3\n")
        p = self.start_job(job, "tried")
        # While the session is live: the owner's git, in the project and in every directory
        # the agent went for, runs nothing.
        self.assertEqual(self.git("status", "--short").returncode, 0)
        self.assertEqual(self.git("checkout", "-q", "-b", "live").returncode, 0)
        self.assertEqual(self.git("checkout", "-q", "main").returncode, 0)
        self.assertEqual(self.git("config", "owner.note", "mine").returncode, 0)
        for d in ("sub", "bare", "vendor/lib"):
            cwd = os.path.join(self.ws.project, d)
            self.git("status", cwd=cwd)
            self.git("checkout", "-q", "-b", "live-" + d.replace("/", "-"), cwd=cwd)
        self.assertEqual(self.git("checkout", "-q", "main").returncode, 0)  # as it was
        self.assertEqual(self.marks(), [])
        self.assertFalse(os.path.exists(os.path.join(self.ws.project, "sub/.git")))
        self.assertFalse(os.path.exists(os.path.join(self.ws.project, "bare/HEAD")) and
                         os.path.exists(os.path.join(self.ws.project, "bare/objects")) and
                         os.path.exists(os.path.join(self.ws.project, "bare/refs")))
        with open(os.path.join(self.ws.project, "STOP"), "w"):
            pass
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        # Inside, the project's own repository took everything, and nothing else did.
        self.assertIn("planted .", out)
        for made in ("made sub/.git", "moved sub/.git", "renamed to sub/.GIT", "linked sub/.git",
                     "made a bare repository", "planted bare", "planted sub",
                     "planted vendor/lib"):
            self.assertNotIn(made, out)
        # After it: the commit came back, and the refusals were said.
        self.assertIn("refs/heads/main moved", err)
        self.assertIn("refs/heads/agent-branch made", err)
        self.assertIn("the sandbox was refused", err)
        # The owner's own change to the config, which the sandbox could not make, said loudly.
        self.assertIn("its config or hooks changed during the session", err)
        self.assertNotIn("vendor/", err)  # nothing below the project changed: nothing moved
        self.assertTrue(os.path.isdir(os.path.join(self.ws.project, "vendor/lib/.git")))
        self.assertEqual(self.git("log", "-1", "--format=%s").stdout.strip(), "agent")
        self.assertEqual(self.git("show", "HEAD:work.txt").stdout, "agent\n")
        self.assertEqual(self.git("config", "core.fsmonitor").stdout, "")
        self.assertEqual(self.git("config", "core.hooksPath").stdout, "")
        for d in ("", "sub", "bare", "vendor/lib"):
            cwd = os.path.join(self.ws.project, d)
            self.assertEqual(self.git("status", cwd=cwd).returncode, 0)
            self.git("checkout", "-q", "-b", "after-" + (d.replace("/", "-") or "root"), cwd=cwd)
        self.assertEqual(self.marks(), [])
        # The filter is gone with the session.
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn("vibepit-guard:", f.read())

    @h.release_only
    def test_a_killed_run_gets_its_commits_back_from_prune_once(self):
        job = ("echo agent > work.txt && git add work.txt && "
               "git -c user.name=agent -c user.email=a@example.test commit -qm agent && "
               "echo committed && sleep 300")
        p = self.start_job(job, "committed")
        p.kill()      # SIGKILL: no clean-up, no bring-back
        p.communicate(timeout=30)
        self.assertEqual(self.git("log", "-1", "--format=%s").stdout.strip(), "start")
        r = self.ws.vibepit(INTERNET, ["prune"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("git: refs/heads/main moved", r.stderr)
        self.assertEqual(self.git("log", "-1", "--format=%s").stdout.strip(), "agent")
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn("vibepit-guard:", f.read())
        r = self.ws.vibepit(INTERNET, ["prune"])
        self.assertNotIn("git:", r.stderr)

    @h.release_only
    @h.rootful_only
    def test_commits_come_back_when_vibepit_runs_as_root(self):
        # `sudo vibepit run`: root's state directory is closed to the project's owner, whose
        # git brings the commits back: the copy must be reachable for that fetch all the same.
        # Run as root, vibepit runs the agent as the project's owner: 1000 here.
        for root, dirs, files in os.walk(self.ws.project):
            for n in dirs + files + ["."]:
                os.lchown(os.path.join(root, n), 1000, 1000)
        self.ws.uid = 1000
        state = tempfile.mkdtemp(prefix="vpe2e-root-state-")
        self.addCleanup(shutil.rmtree, state, True)
        env = self.ws.env(INTERNET)
        env["XDG_STATE_HOME"] = state
        job = "git -c user.name=agent -c user.email=a@example.test commit -q --allow-empty -m agent"
        r = subprocess.run([os.path.join(h.BIN, "vibepit"), "run", "-q", "-T", "--upstream-dns",
                            h.DNS_ADDR, "--", "bash", "-c", job], env=env, cwd=self.ws.project,
                           capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("git: refs/heads/main moved", r.stderr)
        self.assertEqual(self.git("log", "-1", "--format=%s").stdout.strip(), "agent")


if __name__ == "__main__":
    h.main()
