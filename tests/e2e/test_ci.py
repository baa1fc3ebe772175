"""vibepit ci end to end: a real Docker engine, the default Debian sandbox image and the fake
internet of e2e_harness. Each test runs one job (a bash script in the sandbox) the way a
pipeline would: no terminal, no stdin, and the job's exit status and output passed through.
The jobs reach for hosts with curl through the proxy; `%{http_connect}` is the proxy's
answer to the CONNECT, whatever the fake upstream (an echo server) says after it."""

import json
import os
import signal
import unittest
import xml.etree.ElementTree as ET

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
SCHEMA = os.path.join(h.REPO, "docs", "ci-report.schema.json")
DNS = ["--upstream-dns", h.DNS_ADDR]

# Bash for the jobs: `connect HOST:PORT` prints the proxy's status for a CONNECT to it.
PRELUDE = ("connect() { curl -s -o /dev/null --max-time 5 -w '%{http_connect}' -p "
           "\"http://$1/\" || true; }\n")


class CiTest(unittest.TestCase):
    def setUp(self):
        self.ws = h.Workspace()
        self.addCleanup(self.ws.close)

    def ci(self, args, job, expect, timeout=300, extra_env=None):
        """vibepit ci ARGS -- bash -c PRELUDE+JOB; checks the exit status, returns the run."""
        r = self.ws.vibepit(INTERNET, ["ci", "-q"] + DNS + args + ["--", "bash", "-c",
                                                                   PRELUDE + job],
                            timeout=timeout, extra_env=extra_env)
        self.assertEqual(r.returncode, expect, "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr))
        self.assertEqual(self.left_over(), [], "the session was not removed")
        return r

    def left_over(self):
        import hashlib
        project = hashlib.sha256(os.path.realpath(self.ws.project).encode()).hexdigest()[:16]
        return h.left_over("dev.vibepit.project=" + project)

    def wait_until_started(self, p):
        """Read the job's stdout until it prints "started" (up to two minutes)."""
        line = h.wait_for_line(p, "started", 120)
        self.assertIn("started", line, p.stderr.read() if p.poll() is not None else "")

    def path(self, name):
        return os.path.join(self.ws.project, name)

    def report(self, name="report.json"):
        import jsonschema
        with open(self.path(name)) as f:
            doc = json.load(f)
        with open(SCHEMA) as f:
            jsonschema.Draft202012Validator(json.load(f)).validate(doc)
        return doc

    @staticmethod
    def dest(doc, protocol, host, port=None):
        found = [d for d in doc["destinations"] if d["protocol"] == protocol and d["host"] == host
                 and (port is None or d["port"] == port)]
        assert len(found) == 1, (protocol, host, port, doc["destinations"])
        return found[0]

    def session_log(self):
        """The decision records of the workspace's only session (kept after the session)."""
        sessions = os.listdir(self.ws.sessions_dir())
        self.assertEqual(len(sessions), 1, sessions)
        path = os.path.join(self.ws.sessions_dir(), sessions[0], "log", "decisions.ndjson")
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    # ------------------------------------------------------------------ enforce

    def test_enforce_reports_both_and_fail_on_deny_turns_exit_0_into_3(self):
        job = ('echo "allowed $(connect a.pkg.test:443)"; echo "unlisted $(connect other.test:443)"'
               '; echo to-stderr >&2')
        r = self.ci(["-a", "a.pkg.test:443", "--report", "report.json", "--fail-on-deny"], job, 3)
        # The job's output is streamed through unchanged, stdout and stderr apart.
        self.assertEqual(r.stdout, "allowed 200\nunlisted 403\n")
        self.assertIn("to-stderr", r.stderr)
        self.assertIn("denied     connect other.test:443 (not_allowlisted)", r.stderr)
        doc = self.report()
        self.assertEqual(doc["mode"], "enforce")
        self.assertEqual(doc["command_exit"]["status"], 0)
        self.assertEqual(doc["exit_status"], 3)
        self.assertIn("--fail-on-deny", doc["exit_reason"])
        ok = self.dest(doc, "connect", "a.pkg.test", 443)
        self.assertEqual((ok["verdict"], ok["reason"], ok["rule"]),
                         ("allow", "allowlisted", "a.pkg.test:443"))
        bad = self.dest(doc, "connect", "other.test", 443)
        self.assertEqual((bad["verdict"], bad["reason"], bad["count"]), ("deny", "not_allowlisted", 1))
        self.assertEqual(doc["totals"]["denied"], 1)

        # Without --fail-on-deny the status is the job's; JUnit shows the one denial, and the
        # Markdown table goes to the job summary of GitHub Actions.
        summary = os.path.join(self.ws.root, "step-summary.md")
        with open(summary, "w") as f:
            f.write("earlier step\n")
        os.chown(summary, self.ws.uid, self.ws.uid)
        self.ci(["-a", "a.pkg.test:443", "--report", "junit.xml", "--format", "junit"], job, 0,
                extra_env={"GITHUB_STEP_SUMMARY": summary})
        with open(summary) as f:
            md = f.read()
        self.assertTrue(md.startswith("earlier step\n## vibepit ci: egress report (enforce)"), md)
        self.assertIn("| ❌ denied | `other.test:443` | connect | 1 |", md)
        root = ET.parse(self.path("junit.xml")).getroot()
        self.assertEqual(root.tag, "testsuites")
        suite = root.find("testsuite")
        cases = {c.get("name"): c for c in suite.findall("testcase")}
        self.assertEqual(set(cases), {"a.pkg.test:443", "other.test:443"})
        self.assertIsNone(cases["a.pkg.test:443"].find("failure"))
        failure = cases["other.test:443"].find("failure")
        self.assertIsNotNone(failure)
        self.assertEqual(failure.get("type"), "not_allowlisted")
        self.assertEqual((suite.get("tests"), suite.get("failures")), ("2", "1"))

    def test_network_yaml_applies_and_the_exit_status_is_the_jobs(self):
        os.makedirs(self.path(".vibepit"))
        with open(self.path(".vibepit/network.yaml"), "w") as f:
            f.write("allow-http:\n  - \"*.pkg.test:443\"\nallow-dns:\n  - \"a.pkg.test\"\n")
        for p in (".vibepit", ".vibepit/network.yaml"):   # the checkout belongs to the job's user
            os.chown(self.path(p), self.ws.uid, self.ws.uid)
        job = ('[ "$(connect b.pkg.test:443)" = 200 ] || exit 10\n'
               'getent hosts a.pkg.test >/dev/null || exit 11\n'
               'getent hosts other.test >/dev/null && exit 12\n'
               'exit 7')
        self.ci(["--report", "report.json", "--fail-on-deny"], job, 7)
        doc = self.report()
        self.assertEqual(doc["command_exit"]["status"], 7)
        self.assertEqual(self.dest(doc, "connect", "b.pkg.test")["rule"], "*.pkg.test:443")
        dns = self.dest(doc, "dns", "a.pkg.test")
        self.assertEqual((dns["verdict"], dns["rule"], dns["port"]), ("allow", "a.pkg.test", 53))
        self.assertEqual(self.dest(doc, "dns", "other.test")["verdict"], "deny")

    # ------------------------------------------------------------------ audit

    def test_audit_allows_and_marks_but_private_ranges_stay_blocked(self):
        job = ('[ "$(connect a.pkg.test:443)" = 200 ] || exit 10\n'
               '[ "$(connect other.test:443)" = 200 ] || exit 11\n'       # would be denied
               '[ "$(connect rebind-private.test:443)" = 403 ] || exit 12\n'  # 10.0.0.1
               '[ "$(connect 10.0.0.1:443)" = 403 ] || exit 13\n'
               'getent hosts other.test >/dev/null || exit 14\n')
        self.ci(["--mode", "audit", "-a", "a.pkg.test:443", "--report", "report.json",
                 "--fail-on-deny"], job, 3)   # the blocked canary is a real denial
        doc = self.report()
        self.assertEqual(doc["mode"], "audit")
        self.assertEqual(self.dest(doc, "connect", "a.pkg.test")["verdict"], "allow")
        unlisted = self.dest(doc, "connect", "other.test")
        self.assertEqual((unlisted["verdict"], unlisted["reason"]), ("would_deny", "not_allowlisted"))
        self.assertEqual(self.dest(doc, "dns", "other.test")["verdict"], "would_deny")
        for host in ("rebind-private.test", "10.0.0.1"):
            canary = self.dest(doc, "connect", host)
            self.assertEqual((canary["verdict"], canary["reason"]), ("deny", "blocked_address"), canary)
        # The decision records carry the mode.
        records = [r for r in self.session_log() if r.get("event") == "decision"]
        self.assertTrue(records)
        self.assertEqual({r["mode"] for r in records}, {"audit"})
        self.assertEqual(h.sh("docker", "ps", "-aq", "--filter", "label=dev.vibepit.test=e2e",
                              "--filter", "label=dev.vibepit.role=proxy").stdout.strip(), "")

    # ------------------------------------------------------------------ learn

    def test_learn_proposes_the_smallest_rules_and_enforce_then_passes(self):
        job = ("for t in a.pkg.test:443 b.pkg.test:443 c.pkg.test:443 api.other.test:8443; do\n"
               '  getent hosts "${t%:*}" >/dev/null || exit 20\n'
               '  [ "$(connect "$t")" = 200 ] || exit 21\n'
               "done\n")
        r = self.ci(["--mode", "learn", "--report", "learn.json"], job, 0)
        learned = self.path(".vibepit/network.learned.yaml")
        self.assertIn("proposed rules written to " + learned, r.stderr)
        doc = self.report("learn.json")
        self.assertEqual(doc["proposal"], {"allow-http": ["*.pkg.test:443", "api.other.test:8443"],
                                           "allow-dns": ["*.pkg.test", "api.other.test"]})
        self.assertEqual(doc["totals"]["would_deny"], 8)
        with open(learned) as f:
            text = f.read()
        self.assertIn('allow-http:\n  - "*.pkg.test:443"\n  - "api.other.test:8443"\n', text)

        # The same job under the proposal, in enforce mode: no denial at all.
        os.rename(learned, self.path("learned.yaml"))
        self.ci(["--policy", "learned.yaml", "--report", "enforce.json", "--fail-on-deny"], job, 0)
        doc = self.report("enforce.json")
        self.assertEqual((doc["totals"]["denied"], doc["totals"]["would_deny"]), (0, 0))
        self.assertEqual(doc["totals"]["allowed"], 8)

    # ------------------------------------------------------------------ the report is always written

    def test_interrupted_run_still_writes_its_report(self):
        p = self.ws.vibepit_popen(INTERNET, ["ci", "-q"] + DNS + [
            "-a", "a.pkg.test:443", "--report", "report.json", "--",
            "bash", "-c", PRELUDE + 'connect a.pkg.test:443; echo started; sleep 120'])
        self.wait_until_started(p)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        doc = self.report()
        self.assertEqual(doc["command_exit"]["interrupted"], "SIGTERM")
        self.assertIsNone(doc["command_exit"]["status"])
        self.assertEqual(self.dest(doc, "connect", "a.pkg.test")["verdict"], "allow")
        self.assertEqual(self.left_over(), [])

    def test_a_run_that_cannot_start_reports_why(self):
        r = self.ws.vibepit(INTERNET, ["ci", "-q"] + DNS + [
            "-p", "no-such-preset", "--report", "report.json", "--", "true"])
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("no-such-preset", r.stderr)
        doc = self.report()
        self.assertIsNone(doc["command_exit"]["status"])
        self.assertIn("no-such-preset", doc["command_exit"]["error"])
        self.assertEqual(doc["destinations"], [])

    # ------------------------------------------------------------------ the report is complete or says not

    @h.release_only
    def test_a_denial_outlives_the_log_rotating_and_the_ring_wrapping(self):
        # The proxy's log rotates past 64 KiB here and its ring keeps 128 records, so the
        # denial leaves both long before the job ends: the report is made from the live
        # decision stream, and still has it.
        job = ('echo "unlisted $(connect other.test:443)"\n'
               'for i in $(seq 300); do curl -s -o /dev/null --max-time 5 http://a.pkg.test/$i'
               ' || exit 20; done')
        r = self.ci(["-a", "a.pkg.test:80", "--report", "report.json", "--fail-on-deny"], job, 3,
                    extra_env={"VIBEPIT_TEST_DECISION_LOG_MAX_BYTES": "65536",
                               "VIBEPIT_TEST_DECISION_RING": "128"})
        self.assertEqual(r.stdout, "unlisted 403\n")
        doc = self.report()
        self.assertTrue(doc["complete"], doc["incomplete_reasons"])
        self.assertEqual(self.dest(doc, "connect", "other.test")["verdict"], "deny")
        self.assertEqual(self.dest(doc, "http", "a.pkg.test", 80)["allowed"], 300)
        self.assertGreaterEqual(doc["records"]["received"], 301)
        session = os.path.join(self.ws.sessions_dir(), os.listdir(self.ws.sessions_dir())[0])
        self.assertTrue(os.path.exists(os.path.join(session, "log", "decisions.ndjson.1")),
                        "the log did not rotate: the test proves nothing")

    @h.release_only
    def test_a_proxy_that_dies_makes_the_report_incomplete_and_the_job_fail(self):
        # In audit mode too: the job ends well, and nothing was denied, but the report
        # cannot show what the job did after the proxy died.
        p = self.ws.vibepit_popen(INTERNET, ["ci", "-q"] + DNS + [
            "--mode", "audit", "--report", "report.json", "--format", "junit", "--",
            "bash", "-c", PRELUDE + 'connect a.pkg.test:443; echo; echo started\n'
            'for i in $(seq 1500); do [ "$(connect a.pkg.test:443)" = 200 ] || exit 0; sleep 0.2;'
            ' done; exit 9'])   # up to 5 min for the kill to show: a busy engine is slow
        self.wait_until_started(p)
        proxies = h.sh("docker", "ps", "-q", "--filter", "label=dev.vibepit.test=e2e",
                       "--filter", "label=dev.vibepit.role=proxy").stdout.split()
        self.assertEqual(len(proxies), 1, proxies)
        h.sh("docker", "kill", proxies[0])
        out, err = p.communicate(timeout=400)
        self.assertEqual(p.returncode, 4, err)
        self.assertIn("the report is incomplete", err)
        with open(os.path.join(self.ws.sessions_dir(), os.listdir(self.ws.sessions_dir())[0],
                               "report.json")) as f:
            doc = json.load(f)
        self.assertEqual(doc["command_exit"]["status"], 0)
        self.assertFalse(doc["complete"])
        reasons = " / ".join(doc["incomplete_reasons"])
        self.assertIn("stopped before its final counters", reasons)
        self.assertIn("the proxy exited with status 137", reasons)
        suite = ET.parse(self.path("report.json")).getroot().find("testsuite")
        self.assertEqual(suite.get("errors"), "1")
        self.assertEqual(self.left_over(), [])

    # ------------------------------------------------------------------ the home

    @h.release_only
    def test_a_jobs_home_is_gone_for_the_next_job_unless_it_names_a_cache(self):
        plant = "git config --global url.https://evil.test/.insteadOf https://github.com/"
        look = "git config --global --get url.https://evil.test/.insteadOf && exit 9; exit 0"
        self.ci([], plant, 0)
        self.ci([], look, 0)                                    # a fresh home: nothing there
        self.addCleanup(self.remove_volumes)
        self.ci(["--cache-home", "deps"], plant, 0)
        self.ci(["--cache-home", "deps"], look, 9)              # the named cache keeps it
        self.ci(["--cache-home", "other"], look, 0)             # another key, another home
        self.assertEqual(self.volumes("dev.vibepit.role=session-home"), [])
        self.assertEqual(len(self.volumes("dev.vibepit.role=cache-home")), 2)
        r = self.ws.vibepit(INTERNET, ["ci", "--cache-home", "../x", "--", "true"])
        self.assertEqual(r.returncode, 105, r.stderr)   # CLI11's validation error (docs/cli.md)
        self.assertIn("a key is 1 to 64 of the characters", r.stderr)

    def volumes(self, label):
        """The project's volumes that carry `label` (KEY=VALUE). One filter, the rest here:
        Podman 4.3 takes two label filters as either, Docker as both."""
        import hashlib
        project = hashlib.sha256(os.path.realpath(self.ws.project).encode()).hexdigest()[:16]
        names = h.sh("docker", "volume", "ls", "-q", "--filter",
                     "label=dev.vibepit.project=" + project).stdout.split()
        key, value = label.split("=", 1)
        return [v["Name"] for v in (json.loads(h.sh("docker", "volume", "inspect", *names).stdout)
                                    if names else [])
                if (v.get("Labels") or {}).get(key) == value]

    def remove_volumes(self):
        for v in self.volumes("dev.vibepit.test=e2e"):
            h.sh("docker", "volume", "rm", "-f", v, check=False)

    @h.release_only
    def test_a_job_that_swaps_the_report_directory_for_a_symlink_writes_nothing_outside(self):
        # The report's directory is opened before the job starts; the job then moves it away
        # and plants a link to a directory outside the checkout in its place.
        outside = os.path.join(self.ws.root, "outside")
        os.makedirs(os.path.join(outside, "sub"))
        job = "mv out out.orig && ln -s %s out" % outside
        self.ci(["--report", "out/sub/report.json", "--mode", "learn",
                 "--learn-file", "out/learned.yaml"], job, 0)
        self.assertEqual(os.listdir(outside), ["sub"])
        self.assertEqual(os.listdir(os.path.join(outside, "sub")), [])
        self.assertTrue(os.path.isfile(self.path("out.orig/sub/report.json")))
        self.assertTrue(os.path.isfile(self.path("out.orig/learned.yaml")))

    @h.release_only
    def test_in_github_actions_the_job_cannot_issue_workflow_commands(self):
        # The runner would take these as commands: mask vibepit's own lines, forge an error.
        r = self.ci([], 'echo "::add-mask::vibepit"; echo "::error::forged"', 0,
                    extra_env={"GITHUB_ACTIONS": "true"})
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^::stop-commands::[0-9a-f]{24}$", r.stdout)
        token = lines[0].split("::")[2]
        self.assertEqual(lines[1:], ["::add-mask::vibepit", "::error::forged", "::%s::" % token])
        # Elsewhere the output passes through as it is.
        r = self.ci([], 'echo "::error::x"', 0)
        self.assertEqual(r.stdout, "::error::x\n")

    def test_report_path_is_never_followed_through_a_symlink(self):
        outside = os.path.join(self.ws.root, "outside.txt")
        with open(outside, "w") as f:
            f.write("keep me")
        os.symlink(outside, self.path("report.json"))
        r = self.ws.vibepit(INTERNET, ["ci", "-q"] + DNS + ["--report", "report.json", "--", "true"])
        with open(outside) as f:
            self.assertEqual(f.read(), "keep me")
        self.assertIn("report", r.stderr)


if __name__ == "__main__":
    h.main()
