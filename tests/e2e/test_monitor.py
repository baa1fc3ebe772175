"""vibepit monitor in a real terminal (tmux), against real sessions and the fake internet.

A session without ask mode: a denied request appears; `a` lets the next one through; `A`
also writes .vibepit/network.yaml with its owner kept; what the agent sends with escape
bytes is shown escaped and leaves the pane's title and screen alone; without a terminal the
monitor says to use `vibepit logs -f`.

A session with --ask: a held curl completes with 200 after `a`, gets 403 after `d` and after
the time limit; 300 held requests from one client leave an allowed request unaffected; the
monitor exits with 0 when the session ends.
"""

import hashlib
import os
import shlex
import signal
import subprocess
import time
import unittest

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
BASE = ["-a", "allowed.test:80", "--allow-dns", "allowed.test", "--upstream-dns", h.DNS_ADDR]


class Pane:
    """vibepit monitor in a tmux pane of its own server, 80x24."""

    def __init__(self, ws):
        self.sock = "vpe2e-mon-%d-%d" % (os.getpid(), id(self))
        self.ws = ws
        env = ws.env(INTERNET, {"TERM": "screen"})
        inner = " ".join(["env", "-i"] + [shlex.quote("%s=%s" % kv) for kv in env.items()]
                         + [shlex.quote(a) for a in ws.argv(["monitor"])])
        self.tmux("new-session", "-d", "-s", "m", "-x", "80", "-y", "24", "-c", ws.project,
                  "%s; echo EXIT=$?; sleep 600" % inner)

    def tmux(self, *args):
        return subprocess.run([h.need("tmux"), "-L", self.sock] + list(args), capture_output=True,
                              text=True, timeout=20)

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "m").stdout

    def title(self):
        return self.tmux("display-message", "-p", "-t", "m", "#{pane_title}").stdout.strip()

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "m", *keys)

    def wait_for(self, text, timeout=30):
        shown = h.wait_until(lambda: text in self.screen() and self.screen(), timeout=timeout,
                             interval=0.2)
        if not shown:
            raise AssertionError("no %r on the monitor's screen; it shows:\n%s" % (text, self.screen()))
        return shown

    def filter(self, text):
        self.keys("/")
        self.keys("-l", text)
        self.keys("Enter")
        self.wait_for('filter "%s"' % text if text else "filter cleared")

    def close(self):
        self.tmux("kill-server")


class Session:
    """A vibepit run -- sleep in a fresh workspace, and its sandbox for curl."""

    def __init__(self, args):
        self.ws = h.Workspace()
        self.owner = self.ws.vibepit_popen(INTERNET, ["run", "-q", "-T"] + args + ["--", "sleep", "900"])
        if not h.wait_until(self.up, timeout=240, interval=0.25):
            raise RuntimeError("the session did not come up: %s" % self.owner.stderr.read())

    def up(self):
        if self.owner.poll() is not None:
            raise RuntimeError("vibepit run exited: %s" % self.owner.stderr.read())
        project = hashlib.sha256(os.path.realpath(self.ws.project).encode()).hexdigest()[:16]
        return h.sh("docker", "ps", "-q", "--filter", "label=dev.vibepit.role=sandbox", "--filter",
                    "label=dev.vibepit.project=" + project).stdout.strip()

    def sandbox(self, script, **kw):
        return self.ws.vibepit(INTERNET, ["run", "-q", "-T", "--", "bash", "-c", script], **kw)

    def sandbox_popen(self, script):
        p = self.ws.vibepit_popen(INTERNET, ["run", "-q", "-T", "--", "bash", "-c", script])
        return p

    def close(self):
        if self.owner.poll() is None:
            self.owner.send_signal(signal.SIGTERM)
            self.owner.wait(60)
        self.ws.close()


def curl(url, extra=""):
    return "curl -s %s -o /dev/null -w '%%{http_code} %%{num_connects}\\n' %s" % (extra, url)


class MonitorCase(unittest.TestCase):
    """A session started with ARGS, and the monitor watching it until READY shows."""

    ARGS, READY = BASE, "monitor: j/k"

    @classmethod
    def setUpClass(cls):
        cls.s = Session(cls.ARGS)
        cls.pane = Pane(cls.s.ws)
        try:
            cls.pane.wait_for(cls.READY)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.pane.close()
        cls.s.close()


class MonitorTest(MonitorCase):

    def test_without_a_terminal_it_points_at_logs(self):
        r = self.s.ws.vibepit(INTERNET, ["monitor"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("vibepit logs -f", r.stderr)

    def test_a_denied_request_appears_and_a_lets_the_next_one_through(self):
        r = self.s.sandbox(curl("http://m1.wild.test/"))
        self.assertEqual(r.stdout.split()[0], "403", r.stdout + r.stderr)
        self.pane.filter("m1.wild")
        screen = self.pane.wait_for("m1.wild.test")
        self.assertIn(">http m1.wild.test", screen)  # selected
        self.pane.keys("a")
        self.pane.wait_for("allowed m1.wild.test:80")
        r = self.s.sandbox(curl("http://m1.wild.test/"))
        self.assertEqual(r.stdout.split()[0], "200", r.stdout + r.stderr)

    def test_A_saves_to_the_network_file_with_its_owner_kept(self):
        r = self.s.sandbox(curl("http://m2.wild.test/"))
        self.assertEqual(r.stdout.split()[0], "403", r.stdout + r.stderr)
        self.pane.filter("m2.wild")
        self.pane.wait_for("m2.wild.test")
        self.pane.keys("A")
        self.pane.wait_for("saved to")
        path = os.path.join(self.s.ws.project, ".vibepit", "network.yaml")
        with open(path) as f:
            self.assertIn("m2.wild.test:80", f.read())
        st = os.stat(path)
        self.assertEqual((st.st_uid, st.st_gid), (self.s.ws.uid, self.s.ws.uid))
        r = self.s.sandbox(curl("http://m2.wild.test/"))
        self.assertEqual(r.stdout.split()[0], "200", r.stdout + r.stderr)

    def test_a_on_a_dns_row_lets_the_next_query_be_answered(self):
        probe = "getent ahostsv4 d1.wild.test >/dev/null && echo answered || echo refused"
        self.assertEqual(self.s.sandbox(probe).stdout.strip(), "refused")
        self.pane.filter("d1.wild")
        screen = self.pane.wait_for("dns  d1.wild.test")
        self.assertIn(">dns  d1.wild.test", screen)
        self.pane.keys("a")
        self.pane.wait_for("allowed d1.wild.test (generation")
        self.assertEqual(self.s.sandbox(probe).stdout.strip(), "answered")

    def test_resize_and_no_color(self):
        for cols, rows in ((120, 40), (60, 12), (80, 24)):
            self.pane.tmux("resize-window", "-t", "m", "-x", str(cols), "-y", str(rows))
            lines = h.wait_until(lambda: (lambda ls: len(ls) == rows and ls)(
                self.pane.screen().rstrip("\n").split("\n")), timeout=10, interval=0.2)
            self.assertTrue(lines, self.pane.screen())
            self.assertTrue(lines[-1].startswith("monitor: j/k"), lines)
            self.assertTrue(all(len(line) <= cols for line in lines), lines)
        # NO_COLOR (set for every vibepit the tests run): bold and reverse video, no colour.
        with_escapes = self.pane.tmux("capture-pane", "-p", "-e", "-t", "m").stdout
        self.assertIn("\x1b[", with_escapes)
        for sgr in ("[31m", "[32m", "[33m", ";31m", ";32m", ";33m"):
            self.assertNotIn(sgr, with_escapes)

    def test_escape_bytes_are_shown_escaped_and_reach_no_terminal(self):
        before = self.pane.title()
        # A raw CONNECT line and a DNS name, each with an OSC that would set the title and a
        # CSI that would clear the screen.
        r = self.s.sandbox(
            "p=$(awk '/nameserver/{print $2; exit}' /etc/resolv.conf); "
            "exec 3<>/dev/tcp/$p/3128; printf 'CONNECT \\033]0;pwned\\007x\\033[2J.test:443 "
            "HTTP/1.1\\r\\n\\r\\n' >&3; timeout 5 head -c 12 <&3; echo; "
            "exec 4<>/dev/udp/$p/53; printf '\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00"
            "\\x00\\x00\\x0cn\\x1b]0;pwned\\x07x\\x04test\\x00\\x00\\x01\\x00\\x01' >&4; sleep 1")
        self.assertIn("HTTP/1.1 400", r.stdout, r.stdout + r.stderr)
        self.pane.filter("pwned")
        screen = self.pane.wait_for("pwned")
        # The DNS server writes such octets as \DDD; the monitor shows its backslashes doubled.
        self.assertIn("dns  n\\\\027\\\\0930\\\\059pwned", screen)
        lines = screen.split("\n")
        self.assertTrue(lines[0].startswith("held "), screen)  # the status line, in place
        self.assertIn("monitor: j/k", screen)  # nothing was cleared
        self.assertEqual(self.pane.title(), before)
        self.assertNotIn("pwned", self.pane.title())
        self.pane.filter("")


class AskMonitorTest(MonitorCase):
    ARGS, READY = BASE + ["--ask", "--ask-timeout", "6"], "ask 6s"

    def held_curl(self, host):
        p = self.s.sandbox_popen(curl("http://%s/" % host, "-D /dev/stderr"))
        self.pane.wait_for("HELD")
        screen = self.pane.wait_for(host)
        self.assertIn(">http %s" % host, screen)  # the newest held row is selected
        return p

    def test_a_held_curl_completes_after_a(self):
        p = self.held_curl("h1.wild.test")
        self.pane.keys("a")
        out, err = p.communicate(timeout=60)
        self.assertEqual(out.split(), ["200", "1"], out + err)  # one request, no retry

    def test_d_refuses_a_held_request(self):
        p = self.held_curl("h2.wild.test")
        self.pane.keys("d")
        out, err = p.communicate(timeout=60)
        self.assertEqual(out.split()[0], "403", out + err)
        self.assertIn("refused by the user", err)

    def test_the_time_limit_answers_403(self):
        p = self.held_curl("h3.wild.test")
        t0 = time.monotonic()
        out, err = p.communicate(timeout=60)
        self.assertEqual(out.split()[0], "403", out + err)
        self.assertIn("no allow came in the 6 s", err)
        self.assertGreater(time.monotonic() - t0, 2)

    def test_300_held_requests_of_one_client_leave_an_allowed_one_unaffected(self):
        script = (
            "p=$(awk '/nameserver/{print $2; exit}' /etc/resolv.conf); fds=(); "
            "for i in $(seq 300); do exec {fd}<>/dev/tcp/$p/3128 || exit 9; "
            "printf 'CONNECT f%d.wild.test:80 HTTP/1.1\\r\\n\\r\\n' $i >&$fd; fds+=($fd); done; "
            "sleep 1; s=$(date +%s%N); " + curl("http://allowed.test/") +
            "; echo took $(( ($(date +%s%N) - s) / 1000000 ))")
        p = self.s.sandbox_popen(script + "; sleep 10")
        self.pane.wait_for("held 64", timeout=60)  # ask-max-per-client: the rest refused at once
        out, err = p.communicate(timeout=120)
        lines = out.split("\n")
        self.assertEqual(lines[0].split(), ["200", "1"], out + err)
        self.assertLess(int(lines[1].split()[1]), 2000, out)

    def test_zz_the_monitor_exits_when_the_session_ends(self):
        self.s.owner.send_signal(signal.SIGTERM)
        self.s.owner.wait(60)
        screen = self.pane.wait_for("EXIT=", timeout=60)
        self.assertIn("ended", screen)
        self.assertIn("EXIT=0", screen)


if __name__ == "__main__":
    h.main()
