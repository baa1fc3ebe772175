"""vibepit run end to end: a real Docker engine, the default Debian sandbox image, and the
fake internet of e2e_harness. Sessions run as a non-root user (uid 4242, in the docker
group), so file ownership in the project is checked as a user would see it."""

import json
import os
import shutil
import signal
import stat
import subprocess
import time
import unittest

from tests.e2e import e2e_harness as h
from tests.integration.harness import fake_dns

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
RULES = ["-a", "allowed.test:80", "-a", "allowed.test:%d" % h.TLS_PORT, "-a", "rebind-private.test:80",
         "--allow-dns", "allowed.test", "--upstream-dns", h.DNS_ADDR]


def query_bytes(name, qtype=1):
    return "".join("\\x%02x" % b for b in fake_dns.build_query(name, qtype))


def udp_query_script(server, name):
    """Bash that sends one DNS query over UDP and prints the reply as hex (empty: none)."""
    return ("exec 3<>/dev/udp/%s/53 && printf '%s' >&3 && "
            "timeout 3 dd bs=4096 count=1 <&3 2>/dev/null | od -An -tx1 | tr -d ' \\n'; echo"
            % (server, query_bytes(name)))


def reply(hex_text):
    hex_text = hex_text.strip()
    return fake_dns.parse_response(bytes.fromhex(hex_text)) if hex_text else None


class SessionTest(unittest.TestCase):
    """One long session (vibepit run -- sleep) that every test joins with a second
    vibepit run in the same project, as a user opening another terminal would."""

    @classmethod
    def setUpClass(cls):
        cls.ws = h.Workspace()
        cls.owner = cls.ws.vibepit_popen(INTERNET, ["run", "-q", "-T"] + RULES + ["--", "sleep", "900"])

        def up():
            if cls.owner.poll() is not None:
                raise RuntimeError("vibepit run exited: %s" % cls.owner.stderr.read())
            return cls.sandbox_id()
        # the first run may build the user's image
        if not h.wait_until(up, timeout=240, interval=0.25):
            raise RuntimeError("the session did not come up")
        sessions = os.listdir(cls.ws.sessions_dir())
        assert len(sessions) == 1, sessions
        cls.session_dir = os.path.join(cls.ws.sessions_dir(), sessions[0])
        with open(os.path.join(cls.session_dir, "proxy.json")) as f:
            cls.proxy_config = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.owner.send_signal(signal.SIGTERM)
        try:
            cls.owner.wait(60)
        finally:
            cls.ws.close()

    @classmethod
    def containers(cls, role):
        r = h.sh("docker", "ps", "-q", "--filter", "label=dev.vibepit.role=" + role,
                 "--filter", "label=dev.vibepit.project=" + cls.project_hash())
        return r.stdout.split()

    @classmethod
    def project_hash(cls):
        import hashlib
        return hashlib.sha256(os.path.realpath(cls.ws.project).encode()).hexdigest()[:16]

    @classmethod
    def sandbox_id(cls):
        ids = cls.containers("sandbox")
        return ids[0] if ids else None

    def in_sandbox(self, script, expect=0):
        r = self.ws.vibepit(INTERNET, ["run", "-q", "-T", "--", "bash", "-c", script])
        if expect is not None:
            self.assertEqual(r.returncode, expect, "stdout: %s\nstderr: %s" % (r.stdout, r.stderr))
        return r

    def proxy_ip(self):
        return self.proxy_config["proxy-listen"][0].rsplit(":", 1)[0]

    # ------------------------------------------------------------------ no way around

    def test_direct_tcp_to_the_upstream_has_no_route(self):
        r = self.in_sandbox("timeout 5 bash -c 'exec 3<>/dev/tcp/198.51.100.10/80' "
                            "&& echo CONNECTED || echo FAILED")
        self.assertIn("FAILED", r.stdout)
        self.assertNotIn("CONNECTED", r.stdout)

    def test_direct_udp_dns_gets_no_answer(self):
        r = self.in_sandbox(udp_query_script(h.DNS_ADDR, "allowed.test") + " || true")
        self.assertIsNone(reply(r.stdout.splitlines()[-1] if r.stdout.strip() else ""))

    def test_host_is_not_reachable_on_the_session_bridge(self):
        # inhibit_ipv4: the bridge's gateway address is not on the host.
        gateway = self.proxy_ip().rsplit(".", 1)[0] + "." + str(int(self.proxy_ip().rsplit(".", 1)[1]) - 1)
        r = self.in_sandbox("for p in 22 80 2375 8443; do timeout 4 bash -c \"exec 3<>/dev/tcp/%s/$p\" "
                            "&& echo OPEN $p; done; echo done" % gateway)
        self.assertNotIn("OPEN", r.stdout)

    # ------------------------------------------------------------------ DNS

    def test_dns_allowed_resolves_denied_refused(self):
        r = self.in_sandbox("getent hosts allowed.test; echo rc=$?; getent hosts other.test; "
                            "echo rc=$?")
        self.assertIn("198.51.100.10", r.stdout)
        self.assertIn("rc=0", r.stdout)
        self.assertIn("rc=2", r.stdout)  # not found
        r = self.in_sandbox(udp_query_script(self.proxy_ip(), "other.test"))
        self.assertEqual(reply(r.stdout)["rcode"], fake_dns.REFUSED)

    def test_docker_embedded_dns_answers_only_what_the_proxy_does(self):
        # Container names are answered by Docker itself; the proxy's carries a random suffix,
        # so the names the sandbox can guess are not there.
        session = os.path.basename(self.session_dir)
        r = self.in_sandbox(udp_query_script("127.0.0.11", "allowed.test") + "; " +
                            udp_query_script("127.0.0.11", "other.test") + "; " +
                            udp_query_script("127.0.0.11", "rebind-private.test") + "; " +
                            udp_query_script("127.0.0.11", "vibepit-%s-proxy" % session))
        allowed, other, rebind, container = [reply(x) for x in r.stdout.splitlines()[-4:]]
        if allowed is not None:
            self.assertEqual([a[1] for a in allowed["answers"]], ["198.51.100.10"])
        for denied in (other, rebind, container):
            if denied is not None:
                self.assertEqual(denied["answers"], [])
                self.assertNotEqual(denied["rcode"], fake_dns.NOERROR)

    # ------------------------------------------------------------------ HTTP through the proxy

    def test_allowed_denied_and_rebinding(self):
        r = self.in_sandbox(
            "curl -s -o /dev/null -w '%{http_code}\\n' http://allowed.test/; "
            "curl -s -D - -o /dev/null http://other.test/; "
            "curl -s -D - -o /dev/null http://rebind-private.test/")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "200")
        self.assertIn("HTTP/1.1 403", r.stdout)
        self.assertIn("error=http_request_denied", r.stdout)
        self.assertIn("other.test:80", r.stdout)
        self.assertIn("error=destination_ip_prohibited", r.stdout)

    def test_allow_http_opens_a_denied_host_without_a_restart(self):
        probe = "curl -s -o /dev/null -w '%{http_code}\\n' http://third.test/"
        self.assertEqual(self.in_sandbox(probe).stdout.strip(), "403")
        r = self.ws.vibepit(INTERNET, ["allow-http", "--no-save", "third.test:80"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.in_sandbox(probe).stdout.strip(), "200")

    # ------------------------------------------------------------------ hardening

    def test_sandbox_hardening(self):
        r = self.in_sandbox("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; id -u; "
                            "touch /usr/vibepit-test 2>/dev/null && echo ROOTFS-WRITABLE; "
                            "touch /tmp/ok && echo TMP-WRITABLE; "
                            "touch made-in-sandbox && echo PROJECT-WRITABLE; "
                            "echo ipv6-off=$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6)")
        self.assertRegex(r.stdout, r"CapEff:\s+0000000000000000")
        self.assertRegex(r.stdout, r"NoNewPrivs:\s+1")
        self.assertIn("\n%d\n" % h.TEST_UID, "\n" + r.stdout)
        self.assertNotIn("ROOTFS-WRITABLE", r.stdout)
        self.assertIn("TMP-WRITABLE", r.stdout)
        self.assertIn("PROJECT-WRITABLE", r.stdout)
        self.assertIn("ipv6-off=1", r.stdout)
        st = os.stat(os.path.join(self.ws.project, "made-in-sandbox"))
        self.assertEqual((st.st_uid, st.st_gid), (h.TEST_UID, h.TEST_UID))
        inspect = json.loads(h.sh("docker", "inspect", self.sandbox_id()).stdout)[0]
        hc = inspect["HostConfig"]
        self.assertTrue(hc["ReadonlyRootfs"])
        self.assertEqual(h.capabilities(self.sandbox_id()),
                         dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0))
        self.assertIn("no-new-privileges", hc["SecurityOpt"])
        self.assertTrue(hc["Init"])
        if h.limits_enforced():
            self.assertGreater(hc["PidsLimit"], 0)
            self.assertGreater(hc["Memory"], 0)
            # A CPU limit by default: all of the host's CPUs but one, and at least one.
            self.assertEqual(hc["NanoCpus"], max(1, os.cpu_count() - 1) * 10**9)
        else:
            # Rootless Podman on cgroup v1 sets no limits at all; vibepit says so at start.
            self.assertEqual((hc["PidsLimit"] or 0, hc["Memory"]), (0, 0))
            ws = h.Workspace()
            self.addCleanup(ws.close)
            r = ws.vibepit(INTERNET, ["run", "-T", "--upstream-dns", h.DNS_ADDR, "--", "true"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("memory, CPU and process limits are not enforced", r.stderr)
        # Only the session network: internal, and no address of the host's on its bridge.
        networks = list(inspect["NetworkSettings"]["Networks"])
        self.assertEqual(len(networks), 1)
        net = json.loads(h.sh("docker", "network", "inspect", networks[0]).stdout)[0]
        self.assertTrue(net["Internal"])
        self.assertEqual(h.host_addresses_in(net["IPAM"]["Config"][0]["Subnet"]), [])
        mounts = {m["Destination"]: m for m in inspect["Mounts"]}
        self.assertNotIn("/var/run/docker.sock", mounts)
        self.assertNotIn("/run/docker.sock", mounts)

    def test_control_api_is_out_of_reach(self):
        # No port at all: a unix socket in the session's own directory, which only the proxy
        # mounts, closed to everyone but the proxy's user.
        self.assertNotIn("control-listen", self.proxy_config)
        self.assertEqual(self.proxy_config["control-socket"], "/run/vibepit/control.sock")
        proxy = json.loads(h.sh("docker", "inspect", self.containers("proxy")[0]).stdout)[0]
        self.assertFalse(proxy["HostConfig"].get("PortBindings"))
        control_dir = os.path.join(self.session_dir, "control")
        self.assertEqual(os.stat(control_dir).st_mode & 0o777, 0o700)
        sock = os.stat(os.path.join(control_dir, "control.sock"))
        self.assertTrue(stat.S_ISSOCK(sock.st_mode))
        self.assertEqual(sock.st_mode & 0o077, 0)
        sandbox = json.loads(h.sh("docker", "inspect", self.sandbox_id()).stdout)[0]
        sources = [m.get("Source", "") for m in sandbox["Mounts"]]
        self.assertFalse([m for m in sources if m.startswith(control_dir)], sources)
        addresses = [n["IPAddress"] for n in proxy["NetworkSettings"]["Networks"].values()]
        r = self.in_sandbox("ls /run/vibepit 2>&1; for a in %s; do timeout 4 bash -c "
                            "\"exec 3<>/dev/tcp/$a/8443\" && echo OPEN $a; done; echo done"
                            % " ".join(addresses))
        self.assertIn("No such file or directory", r.stdout)
        self.assertNotIn("OPEN", r.stdout)
        self.assertIn("done", r.stdout)

    def test_proxy_container_is_hardened_and_has_no_shell(self):
        proxy = self.containers("proxy")[0]
        status, created = h.docker_api("POST", "/containers/%s/exec" % proxy,
                                       {"Cmd": ["/bin/sh", "-c", "true"]})
        self.assertEqual(status, 201)
        status, body = h.docker_api("POST", "/exec/%s/start" % created["Id"], {"Detach": True})
        self.assertGreaterEqual(status, 400)
        self.assertIn("/bin/sh", str(body))
        hc = json.loads(h.sh("docker", "inspect", proxy).stdout)[0]["HostConfig"]
        self.assertTrue(hc["ReadonlyRootfs"])
        self.assertEqual(h.capabilities(proxy),
                         dict.fromkeys(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), 0))
        self.assertFalse(hc["CapAdd"])
        self.assertIn("no-new-privileges", hc["SecurityOpt"])
        user = json.loads(h.sh("docker", "inspect", proxy).stdout)[0]["Config"]["User"]
        self.assertNotIn(user.split(":")[0], ("", "0", "root"))

    # ------------------------------------------------------------------ the CLI

    def test_exit_status_of_a_joined_command(self):
        self.in_sandbox("exit 7", expect=7)

    def test_rules_and_logs_reach_the_session(self):
        self.in_sandbox("curl -s -o /dev/null http://other.test/ || true")
        r = self.ws.vibepit(INTERNET, ["rules", "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rules = json.loads(r.stdout)
        self.assertIn("allowed.test:80", json.dumps(rules))
        r = self.ws.vibepit(INTERNET, ["logs", "--json", "-n", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        records = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        self.assertTrue(any(x.get("host") == "other.test" and x.get("verdict") == "deny"
                            for x in records), r.stdout[-2000:])
        # The same records are in the session's decision log on the host.
        with open(os.path.join(self.session_dir, "log", "decisions.ndjson")) as f:
            self.assertIn('"host":"other.test"', f.read())

    def test_tls_naming_another_host_than_the_connect_is_refused(self):
        """Domain fronting (CONNECT allowed.test, a ClientHello for forbidden.test) is refused
        with a TLS alert and a deny record naming both; naming allowed.test gets through."""
        ca = os.path.join(self.ws.project, "tls-ca.pem")
        shutil.copy(INTERNET.tls_ca, ca)
        os.chmod(ca, 0o644)
        self.addCleanup(os.unlink, ca)
        s_client = ('printf "GET /tls HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n" | '
                    'openssl s_client -proxy "${p%%/}" -connect allowed.test:%d -CAfile tls-ca.pem '
                    '-verify_return_error -quiet -servername %s 2>&1; echo "rc=$?"; echo @@; ')
        r = self.in_sandbox("p=${HTTPS_PROXY#http://}; " + s_client % (h.TLS_PORT, "forbidden.test")
                            + s_client % (h.TLS_PORT, "allowed.test")
                            + "curl -sS -o /dev/null -w '%%{http_code}' --cacert tls-ca.pem https://allowed.test:%d/"
                            % h.TLS_PORT)
        fronted, matching, curl = r.stdout.split("@@")
        self.assertTrue("alert access denied" in fronted and "rc=0" not in fronted, fronted)
        self.assertIn("HTTP/1.1 200", matching)
        self.assertEqual(curl.strip(), "200", r.stdout + r.stderr)
        r = self.ws.vibepit(INTERNET, ["logs", "--json", "-n", "500"])
        records = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        denied = [x for x in records if x.get("reason") == "sni_mismatch" and x.get("event") == "decision"]
        self.assertTrue(denied, r.stdout[-2000:])
        self.assertEqual((denied[-1]["host"], denied[-1]["port"], denied[-1]["verdict"]),
                         ("allowed.test", h.TLS_PORT, "deny"))
        self.assertIn('"forbidden.test"', denied[-1]["detail"])
        r = self.ws.vibepit(INTERNET, ["logs", "--denied", "-n", "500"])
        line = [x for x in r.stdout.splitlines() if "sni_mismatch" in x]
        self.assertTrue(line and "forbidden.test" in line[-1], r.stdout[-2000:])

    def test_status_and_sessions(self):
        r = self.ws.vibepit(INTERNET, ["status", "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)
        self.assertEqual(len(rows), 1)
        self.assertEqual(rows[0]["state"], "running")
        r = self.ws.vibepit(INTERNET, ["sessions", "--json"])
        row = [x for x in json.loads(r.stdout) if x["project_hash"] == self.project_hash()][0]
        self.assertTrue(row["attached"])
        self.assertEqual(row["project"], os.path.realpath(self.ws.project))


class FreshSessionTest(unittest.TestCase):
    """Sessions started and ended per test: exit status, the untrusted network.yaml."""

    def setUp(self):
        self.ws = h.Workspace()

    def tearDown(self):
        self.ws.close()

    def run_session(self, args, script, **kw):
        return self.ws.vibepit(INTERNET, ["run", "-T"] + args + ["--upstream-dns", h.DNS_ADDR,
                                                                 "--", "bash", "-c", script], **kw)

    def test_exit_status_and_cleanup(self):
        # PATH after repeated -p flags stays the PATH (scripts/run.sh calls it so).
        r = self.run_session(["-p", "github", "-p", "pypi", self.ws.project],
                             "echo out; echo err >&2; exit 5")
        self.assertEqual(r.returncode, 5, r.stderr)
        self.assertEqual(r.stdout, "out\n")   # stdout and stderr kept apart
        self.assertIn("err\n", r.stderr)
        session = os.listdir(self.ws.sessions_dir())[0]
        self.assertEqual(h.left_over("dev.vibepit.session=" + session), [])
        with open(os.path.join(self.ws.sessions_dir(), session, "proxy.json")) as f:
            allowed = json.load(f)["allow-http"]
        self.assertIn("github.com:443", allowed)
        self.assertIn("pypi.org:443", allowed)
        # The decision log stays with the session directory.
        self.assertTrue(os.path.exists(os.path.join(self.ws.sessions_dir(), session, "log",
                                                    "decisions.ndjson")))

    def test_down_ends_an_attached_run_which_says_so(self):
        # `vibepit down` from another terminal removes the session; the attached run's own
        # cleanup then finds it gone (its FORWARD rule too, on rootful Podman): no problem to
        # report, only the status of a killed command.
        run = self.ws.vibepit_popen(INTERNET, ["run", "-q", "-T", "--upstream-dns", h.DNS_ADDR,
                                               "--", "bash", "-c", "echo up; exec sleep 120"])
        try:
            self.assertIn("up", h.wait_for_line(run, "up", 120))
            r = self.ws.vibepit(INTERNET, ["down"])
            self.assertEqual(r.returncode, 0, r.stderr)
            run.wait(60)
            said = run.stderr.read()
            self.assertEqual(run.returncode, 137, said)
            # Docker's wait answers the killed command's status while the container is being
            # removed; Podman's finds it gone. On both, vibepit says so in its own words.
            self.assertEqual(said.strip(), "vibepit: the session was removed while the "
                             "command ran (vibepit down or vibepit prune)")
            session = os.listdir(self.ws.sessions_dir())[0]
            self.assertEqual(h.left_over("dev.vibepit.session=" + session), [])
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
                run.wait(60)
            run.stdout.close()
            run.stderr.close()

    def test_two_runs_at_once_make_one_session(self):
        first = self.ws.vibepit_popen(INTERNET, ["run", "-q", "-T", "--upstream-dns", h.DNS_ADDR, "--",
                                                 "sleep", "120"])
        try:
            # The second arrives while the first sets its session up (it holds the project's
            # lock once its session directory exists): it waits, then joins. Started at the
            # same instant, either could take the lock first.
            self.assertTrue(h.wait_until(lambda: os.path.isdir(self.ws.sessions_dir()) and
                                         os.listdir(self.ws.sessions_dir()), timeout=60,
                                         interval=0.02), "the first never made its session")
            r = self.ws.vibepit(INTERNET, ["run", "-q", "-T", "--upstream-dns", h.DNS_ADDR, "--",
                                           "bash", "-c", "echo joined $VIBEPIT_SESSION"])
            self.assertEqual(r.returncode, 0, r.stderr)
            # the second joined (what the first said, when it did not stay)
            said = first.stderr.read() if first.poll() is not None else "(still running)"
            self.assertEqual(len(os.listdir(self.ws.sessions_dir())), 1,
                             "second: %s\nfirst: %s" % (r.stderr, said))
            self.assertEqual(r.stdout.split(), ["joined", os.listdir(self.ws.sessions_dir())[0]])
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(60)
            first.stdout.close()
            first.stderr.close()

    def test_planted_network_yaml_is_not_applied_without_approval(self):
        os.makedirs(os.path.join(self.ws.project, ".vibepit"))
        with open(os.path.join(self.ws.project, ".vibepit", "network.yaml"), "w") as f:
            f.write("allow-http:\n  - other.test:80\n")
        os.chown(os.path.join(self.ws.project, ".vibepit", "network.yaml"), h.TEST_UID, h.TEST_UID)
        probe = "curl -s -o /dev/null -w '%{http_code}\\n' http://other.test/"
        r = self.run_session([], probe)
        self.assertEqual(r.stdout.strip(), "403", r.stderr)
        self.assertIn("not approved", r.stderr)
        self.assertIn("+ allow-http other.test:80", r.stderr)
        r = self.run_session(["--yes"], probe)  # approved now, and remembered
        self.assertEqual(r.stdout.strip(), "200", r.stderr)
        r = self.run_session([], probe)
        self.assertEqual(r.stdout.strip(), "200", r.stderr)
        self.assertNotIn("not approved", r.stderr)


class TtyTest(unittest.TestCase):
    """The interactive default: a shell on a terminal (a pty here), raw mode, the window
    size at start and on SIGWINCH, Ctrl-C delivered inside, the exit status, and the
    terminal as it was afterwards."""

    def setUp(self):
        self.ws = h.Workspace()
        self.master, self.slave = os.openpty()

    def tearDown(self):
        os.close(self.master)
        os.close(self.slave)
        self.ws.vibepit(INTERNET, ["down"])
        self.ws.close()

    def set_size(self, rows, cols):
        import fcntl
        import struct
        import termios
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def read_until(self, text, timeout=30):
        import select
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                self.fail("no %r on the terminal; it shows: %r" % (text, self.seen[-2000:]))
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:
                    self.fail("the terminal closed; it showed: %r" % self.seen[-2000:])

    def read_some(self, wait=0.1):
        """What the terminal has shown so far, after reading what arrives within `wait`."""
        import select
        ready, _, _ = select.select([self.master], [], [], wait)
        if ready:
            try:
                self.seen += os.read(self.master, 4096).decode(errors="replace")
            except OSError:
                self.fail("the terminal closed; it showed: %r" % self.seen[-2000:])
        return self.seen

    def send(self, text):
        os.write(self.master, text.encode())

    def test_interactive_shell(self):
        import termios
        self.seen = ""
        before = termios.tcgetattr(self.slave)
        self.set_size(33, 101)
        p = subprocess.Popen(self.ws.argv(["run", "-q", "--upstream-dns", h.DNS_ADDR]),
                             env=self.ws.env(INTERNET), cwd=self.ws.project, stdin=self.slave,
                             stdout=self.slave, stderr=self.slave, start_new_session=True)
        try:
            self.send("echo READY-$((6*7))\r")
            self.read_until("READY-42", 120)
            self.send("stty size\r")
            self.read_until("33 101")
            self.set_size(40, 120)
            p.send_signal(signal.SIGWINCH)
            # The new size reaches the sandbox's terminal when vibepit has relayed it: ask
            # until it shows, rather than after a pause a busy machine may outlast.

            def resized():
                self.send("stty size\r")
                return h.wait_until(lambda: "40 120" in self.read_some(), timeout=1.0)
            self.assertTrue(h.wait_until(resized, timeout=h.LIVENESS_S * 3),
                            "the new size never reached the sandbox: %r" % self.seen[-2000:])
            # Ctrl-C once the sleep runs, not while the shell still reads the line: only then
            # does it show where the signal went. The marker comes from the job itself, which
            # has the terminal by the time it prints; a marker printed by the shell before it
            # forks would leave a window in which the shell, not the job, takes the Ctrl-C and
            # (as bash does for a foreground job) lets the sleep run on.
            self.send("sh -c 'echo SLEEPING-$((3+4)); exec sleep 60'; "
                      "echo SLEEP-$((2+3))-RAN-OUT\r")
            self.read_until("SLEEPING-7")
            self.send("\x03")          # Ctrl-C: to the sleep inside, not to vibepit
            self.send("echo INTERRUPTED-$((1+1))\r")
            self.read_until("INTERRUPTED-2", 20)
            self.assertNotIn("SLEEP-5-RAN-OUT", self.seen)
            self.send("exit 3\r")
            self.assertEqual(p.wait(60), 3)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(termios.tcgetattr(self.slave), before)  # raw mode undone


if __name__ == "__main__":
    h.main()
