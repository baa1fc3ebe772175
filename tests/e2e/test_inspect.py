"""TLS inspection in a real session: the sandbox's own tools (curl, git, Python, Node.js)
reach an inspected host through the CA bundle vibepit mounts, without a flag of their own;
each request is decided by method and path; a rule added at runtime makes a host that was
tunnelled inspected from the next connection. The fake internet's CA is trusted by the
proxy through --upstream-ca, as a corporate CA would be. And credentials the sandbox never
holds (--secret): curl and git authenticate with values that are in none of its variables,
files or /proc, as docs/credentials.md promises."""

import base64
import hashlib
import json
import os
import shutil
import signal
import unittest

from tests.e2e import e2e_harness as h

INTERNET = h.ModuleInternet()
setUpModule, tearDownModule = INTERNET.start, INTERNET.close
PORT = h.TLS_PORT
URL = "https://inspected.test:%d" % PORT

# Node.js 18 does not read HTTPS_PROXY: CONNECT by hand, then TLS on that socket. The CA
# comes from NODE_EXTRA_CA_CERTS alone.
NODE = r"""
const http = require('http'), tls = require('tls');
const proxy = new URL(process.env.HTTPS_PROXY);
http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT',
              path: 'inspected.test:%d'}).on('connect', (res, socket) => {
  const s = tls.connect({socket, servername: 'inspected.test'}, () => {
    s.write('GET /ok/node HTTP/1.1\r\nHost: inspected.test:%d\r\nConnection: close\r\n\r\n');
  });
  let got = '';
  s.on('data', d => got += d);
  s.on('end', () => console.log('node: ' + got.split('\r\n')[0]));
  s.on('error', e => console.log('node error: ' + e.message));
}).end();
""" % (PORT, PORT)

PYTHON = ("import urllib.request as u\n"
          "print('python:', u.urlopen('%s/ok/python').status)\n" % URL)

TOKEN = "e2e_env_token_P3kX9wQ7zL2m"     # --secret E2E_TOKEN=allowed.test, from the environment
GIT = "e2e_file_token_R8vN4tJ6hB1c"      # --secret E2E_GIT=inspected.test, from a file
GIT_AUTH = "Basic " + base64.b64encode(("x-access-token:" + GIT).encode()).decode()


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


class InspectTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ws = h.Workspace()
        ca = os.path.join(cls.ws.root, "fake-internet-ca.pem")
        shutil.copy(INTERNET.tls_ca, ca)
        os.chmod(ca, 0o644)
        cls.tls_ca = os.path.join(cls.ws.project, "tls-ca.pem")   # for curl --cacert in the sandbox
        shutil.copy(INTERNET.tls_ca, cls.tls_ca)
        os.chmod(cls.tls_ca, 0o644)
        git_file = os.path.join(cls.ws.root, "git-token")
        with open(git_file, "w") as f:
            f.write(GIT + "\n")
        os.chmod(git_file, 0o644)
        rules = ["-a", "inspected.test:%d GET,HEAD /ok/**" % PORT, "-a", "late.test:%d" % PORT,
                 "-a", "inspected.test:%d GET /git-auth/**" % PORT, "-a", "allowed.test:%d" % PORT,
                 "--secret", "E2E_TOKEN=allowed.test:%d" % PORT,
                 "--secret", "E2E_GIT=inspected.test:%d,format=basic:x-access-token,file=%s"
                 % (PORT, git_file),
                 "--upstream-ca", ca, "--upstream-dns", h.DNS_ADDR]
        cls.owner = cls.ws.vibepit_popen(INTERNET, ["run", "-q", "-T"] + rules + ["--", "sleep", "900"],
                                         extra_env={"E2E_TOKEN": TOKEN})

        def up():
            if cls.owner.poll() is not None:
                raise RuntimeError("vibepit run exited: %s" % cls.owner.stderr.read())
            return os.path.exists(cls.ws.sessions_dir()) and os.listdir(cls.ws.sessions_dir()) and \
                cls.in_sandbox_raw("true").returncode == 0
        if not h.wait_until(up, timeout=240, interval=0.5):
            raise RuntimeError("the session did not come up")

    @classmethod
    def tearDownClass(cls):
        cls.owner.send_signal(signal.SIGTERM)
        try:
            cls.owner.wait(60)
        finally:
            cls.ws.close()

    @classmethod
    def in_sandbox_raw(cls, script):
        return cls.ws.vibepit(INTERNET, ["run", "-q", "-T", "--", "bash", "-c", script])

    def in_sandbox(self, script):
        r = self.in_sandbox_raw(script)
        self.assertEqual(r.returncode, 0, "stdout: %s\nstderr: %s" % (r.stdout, r.stderr))
        return r.stdout

    def records(self):
        r = self.ws.vibepit(INTERNET, ["logs", "--json", "-n", "500"])
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]

    def upstream_requests(self):
        path = os.path.join(INTERNET.tmp, "upstream-conns.ndjson")
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [r["target"] for r in rows if r.get("kind") == "https-request"]

    def test_the_sandboxs_tools_trust_the_mounted_bundle(self):
        for name, text in (("check.js", NODE), ("check.py", PYTHON)):
            path = os.path.join(self.ws.project, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
            self.addCleanup(os.unlink, path)
        out = self.in_sandbox(
            "echo \"env: $SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS "
            "$GIT_SSL_CAINFO $PIP_CERT\"; "
            "curl -sS -o /dev/null -w 'curl: %%{http_code}\\n' %s/ok/curl; "
            "curl -sS -o /dev/null -w 'denied: %%{http_code}\\n' %s/admin; "
            "python3 check.py; node check.js; "
            "git ls-remote %s/ok/repo.git 2>&1 | head -3; echo git-done" % (URL, URL, URL))
        self.assertIn("env: " + " ".join(["/etc/vibepit/ca-bundle.pem"] * 6), out)
        self.assertIn("curl: 200", out)
        self.assertIn("denied: 403", out)
        self.assertIn("python: 200", out)
        self.assertIn("node: HTTP/1.1 200", out)
        git = out.split("git-done")[0].split("node:")[-1]
        self.assertNotIn("certificate", git, out)   # TLS was fine; the fake is no git server
        served = self.upstream_requests()
        for target in ("/ok/curl", "/ok/python", "/ok/node", "/ok/repo.git/info/refs?service=git-upload-pack"):
            self.assertIn(target, served)
        self.assertNotIn("/admin", served)
        recs = [r for r in self.records() if r.get("host") == "inspected.test" and r.get("method") != "CONNECT"
                and r.get("event") == "decision"]
        self.assertIn(("GET", "/admin", "deny"), [(r["method"], r.get("path"), r["verdict"]) for r in recs])
        self.assertIn(("GET", "/ok/curl", "allow"), [(r["method"], r.get("path"), r["verdict"]) for r in recs])
        r = self.ws.vibepit(INTERNET, ["logs", "--denied", "-n", "500"])
        self.assertIn("inspected.test:%d/admin" % PORT, r.stdout)

    def test_a_rule_added_at_runtime_inspects_from_the_next_connection(self):
        curl = "curl -sS -o /dev/null -w '%%{http_code}' --cacert tls-ca.pem https://late.test:%d/x/1" % PORT
        # Tunnelled: the upstream's own certificate, which the fake internet's CA signed.
        self.assertEqual(self.in_sandbox(curl).strip(), "200")
        r = self.ws.vibepit(INTERNET, ["allow-http", "late.test:%d GET /x/**" % PORT])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Inspected: the proxy's leaf, which only the mounted bundle trusts.
        r = self.in_sandbox_raw(curl)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        out = self.in_sandbox("curl -sS -o /dev/null -w '%%{http_code} ' https://late.test:%d/x/1; "
                              "curl -sS -o /dev/null -w '%%{http_code}' https://late.test:%d/y" % (PORT, PORT))
        # The plain rule still allows every request; each is now seen, and recorded on its own.
        self.assertEqual(out.strip(), "200 200")
        seen = [r for r in self.records() if r.get("host") == "late.test" and r.get("tunnel")]
        self.assertEqual(sorted({r["method"] for r in seen}), ["GET"], seen)

    def test_credentials_authenticate_and_the_sandbox_sees_only_placeholders(self):
        out = self.in_sandbox(
            "curl -sS -H \"Authorization: Bearer $E2E_TOKEN\" https://allowed.test:%d/hash/e2e; "
            "echo; git ls-remote https://inspected.test:%d/git-auth/%s/repo.git; echo git-rc=$?; "
            "echo ==env; env; echo ==proc; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | tr '\\0' '\\n'; "
            "echo ==files; cat /etc/vibepit/ca-bundle.pem; "
            "find \"$HOME\" /tmp . -xdev -type f -size -2M -exec cat {} + 2>/dev/null; true"
            % (PORT, PORT, sha(GIT_AUTH)))
        first = out.split("\n", 1)[0]
        self.assertEqual(json.loads(first)["header_sha256"].get("authorization"),
                         [sha("Bearer " + TOKEN)], out[:2000])
        self.assertIn("refs/heads/main", out)
        self.assertIn("git-rc=0", out)
        self.assertIn("E2E_TOKEN=vibepit-secret-E2E_TOKEN", out)
        self.assertIn("E2E_GIT=vibepit-secret-E2E_GIT", out)
        for secret in (TOKEN, GIT):
            for form in (secret, base64.b64encode(("x-access-token:" + secret).encode()).decode()):
                self.assertNotIn(form, out, "the sandbox sees a form of a secret")
        recs = [r for r in self.records() if r.get("credential")]
        self.assertIn("E2E_TOKEN", {r["credential"] for r in recs})
        self.assertIn("E2E_GIT", {r["credential"] for r in recs})
        r = self.ws.vibepit(INTERNET, ["secret", "ls"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("E2E_TOKEN  allowed.test:%d" % PORT, r.stdout)
        for secret in (TOKEN, GIT):
            self.assertNotIn(secret, r.stdout + r.stderr)

    def test_a_secret_added_at_runtime_applies_and_goes(self):
        runtime = "e2e_stdin_token_W5yT2kD8"
        r = self.ws.vibepit(INTERNET, ["secret", "add", "E2E_RT=allowed.test:%d,header=X-Rt,format={},stdin"
                                       % PORT], input=runtime + "\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(runtime, r.stdout + r.stderr)
        curl = "curl -sS https://allowed.test:%d/hash/rt" % PORT
        got = json.loads(self.in_sandbox(curl))["header_sha256"]
        self.assertEqual(got.get("x-rt"), [sha(runtime)])
        r = self.ws.vibepit(INTERNET, ["secret", "rm", "E2E_RT"])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(self.in_sandbox(curl))["header_sha256"]
        self.assertNotIn("x-rt", got)


if __name__ == "__main__":
    h.main()
