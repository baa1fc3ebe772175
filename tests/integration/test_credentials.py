"""Credentials the agent never holds (docs/credentials.md): the proxy sets a credential's header
on the requests it sends to the credential's host, in place of the placeholder the client sent.
A fake HTTPS upstream answers /hash/ requests with the SHA-256 of each header it received, so
that no secret ever crosses back. Another host gets the placeholder unchanged, a request a
path rule refuses reaches no upstream, plain HTTP to the same name gets nothing; and the
secret is in no record, log line, control answer, /proc file or core dump of the proxy."""

import array
import base64
import glob
import hashlib
import json
import mmap
import os
import shutil
import signal
import subprocess

from tests.integration import test_inspect
from tests.integration.harness import base, netns
from tests.integration.harness.control import ControlConn, TestCa
from tests.integration.harness.wait import LIVENESS_S, poll
from tests.integration.test_inspect import ALLOWED, start_https

CHOST = "127.0.0.2"
GH_SECRET = "ghp_env_7Qm2ZkV9xR4tLw8N"          # from-env
KEY_SECRET = "key_file_Hs3Jd9Pq1Vb6Yc2X"        # from-file
RUNTIME_SECRET = "rt_api_Lf5Gh8Kd2Mn7Pq4W"      # PUT /v1/secrets/RT
PLACEHOLDER = "Bearer vibepit-secret-GH"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def every_form(secret):
    """The byte strings that would betray `secret`: as given, and base64'd after a user."""
    out = [secret.encode()]
    for user in ("", "x-access-token", "__token__"):
        out.append(base64.b64encode(("%s:%s" % (user, secret)).encode()))
    return out


class CredentialsTest(test_inspect.InspectCase):
    @classmethod
    def setUpClass(cls):
        super(test_inspect.InspectCase, cls).setUpClass()  # the topology; the proxy is ours
        try:
            tmp = cls.topo.tmp
            cls.ca = TestCa(os.path.join(tmp, "tls-ca"))
            cls.allowed_log = start_https(cls.topo, ALLOWED, cls.ca, "allowed",
                                          "DNS:allowed.test,DNS:a.pkg.test")
            cls.inspect_ca = os.path.join(tmp, "inspect-ca.pem")
            cls.key_file = os.path.join(tmp, "key.secret")
            with open(cls.key_file, "w") as f:
                f.write(KEY_SECRET + "\n")
            cls.session_dir = os.path.join(tmp, "session")
            env = netns.clean_env()
            env["VIBEPIT_IT_GH"] = GH_SECRET
            cls.proxy = cls.make_proxy(
                allow_http=["allowed.test:*", "a.pkg.test:4443 GET /hash/**"],
                credentials=[
                    {"name": "GH", "host": "allowed.test:*", "from-env": "VIBEPIT_IT_GH"},
                    {"name": "KEY", "host": "a.pkg.test:4443", "header": "X-Key", "format": "{}",
                     "from-file": cls.key_file},
                ],
                upstream_ca_file=cls.ca.cert, inspect_ca_cert_out=cls.inspect_ca,
                control_listen=[CHOST + ":0"], env=env,
                extra_args=["--session-dir", cls.session_dir])
            cls.cport = cls.proxy.control_listeners[0][1]
        except BaseException:
            cls.tearDownClass()
            raise

    def control(self):
        c = ControlConn.for_session(self.topo, self.topo.px, CHOST, self.cport, self.session_dir)
        self.addCleanup(c.close)
        return c

    def hashes(self, conn, path, headers=None, method="GET"):
        status, _, body = self.get(conn, path, method=method, headers=headers)
        self.assertEqual(status, 200, body)
        return json.loads(body)["header_sha256"]

    # ------------------------------------------------------------------ the data path

    def test_the_placeholder_is_replaced_on_the_credentials_host(self):
        conn, _ = self.inspected("allowed.test")
        got = self.hashes(conn, "/hash/replace", {"Authorization": PLACEHOLDER})
        self.assertEqual(got.get("authorization"), [sha("Bearer " + GH_SECRET)])
        # The same keep-alive connection, a request without the header: it is added.
        got = self.hashes(conn, "/hash/added")
        self.assertEqual(got.get("authorization"), [sha("Bearer " + GH_SECRET)])
        # A plain rule allows allowed.test, so no path is recorded; the credential's name is.
        recs = self.request_records(lambda r: r.get("host") == "allowed.test" and r.get("credential"))
        self.assertEqual({r["credential"] for r in recs}, {"GH"})

    def test_every_copy_the_client_sent_is_replaced(self):
        conn, _ = self.inspected("allowed.test")
        conn.putrequest("GET", "/hash/twice")
        conn.putheader("Authorization", PLACEHOLDER)
        conn.putheader("authorization", "Basic c29tZTpvdGhlcg==")
        conn.endheaders()
        r = conn.getresponse()
        got = json.loads(r.read())["header_sha256"]
        self.assertEqual(got.get("authorization"), [sha("Bearer " + GH_SECRET)])

    def test_another_host_gets_the_placeholder_unchanged(self):
        conn, _ = self.inspected("a.pkg.test")
        got = self.hashes(conn, "/hash/other", {"Authorization": PLACEHOLDER})
        self.assertEqual(got.get("authorization"), [sha(PLACEHOLDER)])
        self.assertEqual(got.get("x-key"), [sha(KEY_SECRET)])  # its own credential, from the file

    def test_a_request_a_path_rule_refuses_reaches_no_upstream(self):
        conn, _ = self.inspected("a.pkg.test")
        status, proxy_status, _ = self.get(conn, "/hash/refused", method="POST", body=b"x")
        self.assertEqual(status, 403)
        self.assertIn("http_request_denied", proxy_status)
        self.assertNotIn("/hash/refused", self.targets(self.allowed_log))
        rec = self.request_records(lambda r: r.get("path") == "/hash/refused")[-1]
        self.assertEqual(rec.get("verdict"), "deny")
        self.assertNotIn("credential", rec)

    def test_plain_http_to_the_same_name_gets_nothing(self):
        # allowed.test:* names port 8443 too; over plain HTTP the proxy adds nothing.
        r = self.curl("-H", "Authorization: " + PLACEHOLDER, "http://allowed.test:8443/hash/plain")
        self.assertEqual((r.rc, r.http_code), (0, 200), r)
        got = json.loads(r.body)["header_sha256"]
        self.assertEqual(got.get("authorization"), [sha(PLACEHOLDER)])

    # ------------------------------------------------------------------ at runtime

    def test_a_credential_set_at_runtime_applies_from_the_next_request_and_goes(self):
        c = self.control()
        r = c.request("PUT", "/v1/secrets/RT?host=a.pkg.test:4443&header=X-Runtime&format=T%20{}",
                      RUNTIME_SECRET)
        self.assertEqual(r.status, 201, r.body)
        self.assertNotIn(RUNTIME_SECRET, r.body)
        conn, _ = self.inspected("a.pkg.test")
        got = self.hashes(conn, "/hash/runtime")
        self.assertEqual(got.get("x-runtime"), [sha("T " + RUNTIME_SECRET)])
        listed = c.request("GET", "/v1/secrets").json()["secrets"]
        self.assertEqual(sorted(s["name"] for s in listed), ["GH", "KEY", "RT"])
        self.assertEqual(c.request("DELETE", "/v1/secrets/RT").status, 200)
        got = self.hashes(conn, "/hash/runtime-gone")  # the same connection: the next request
        self.assertNotIn("x-runtime", got)

    def test_sighup_rereads_a_credential_file(self):
        fresh = "key_file_rotated_Zt4Ux8Wa"
        try:
            with open(self.key_file + ".new", "w") as f:
                f.write(fresh)
            os.replace(self.key_file + ".new", self.key_file)
            self.proxy.proc.send_signal(signal.SIGHUP)
            poll(lambda: "credential KEY re-read" in self.proxy.stderr(), bool, timeout=LIVENESS_S)
            conn, _ = self.inspected("a.pkg.test")
            self.assertEqual(self.hashes(conn, "/hash/rotated").get("x-key"), [sha(fresh)])
        finally:
            with open(self.key_file + ".new", "w") as f:
                f.write(KEY_SECRET + "\n")
            os.replace(self.key_file + ".new", self.key_file)
            self.proxy.proc.send_signal(signal.SIGHUP)
            poll(lambda: self.proxy.stderr().count("credential KEY re-read") >= 2, bool,
                 timeout=LIVENESS_S)

    # ------------------------------------------------------------------ where it must not be

    def _use_every_secret(self):
        conn, _ = self.inspected("allowed.test")
        self.hashes(conn, "/hash/warm", {"Authorization": PLACEHOLDER})
        conn2, _ = self.inspected("a.pkg.test")
        self.hashes(conn2, "/hash/warm")
        c = self.control()
        r = c.request("PUT", "/v1/secrets/RT2?host=a.pkg.test:4443&header=X-Rt2", RUNTIME_SECRET)
        self.assertEqual(r.status, 201, r.body)
        self.hashes(conn2, "/hash/warm-rt2")
        return c

    def test_the_secret_is_in_nothing_the_proxy_shows(self):
        c = self._use_every_secret()
        shown = []
        for path in ("/v1/rules", "/v1/secrets", "/v1/stats", "/metrics", "/v1/decisions?after=0"):
            r = c.request("GET", path)
            self.assertEqual(r.status, 200, path)
            shown.append((path, r.body.encode()))
        with open(self.proxy.log_path, "rb") as f:
            shown.append(("decision log", f.read()))
        shown.append(("stderr", self.proxy.stderr().encode()))
        pid = self.proxy.proc.pid
        for name in ("environ", "cmdline"):
            with open("/proc/%d/%s" % (pid, name), "rb") as f:
                shown.append(("/proc/PID/" + name, f.read()))
        for where, data in shown:
            for secret in (GH_SECRET, KEY_SECRET, RUNTIME_SECRET):
                for form in every_form(secret):
                    self.assertFalse(form in data, "%s shows %s" % (where, form))
        c.request("DELETE", "/v1/secrets/RT2")

    def test_a_core_dump_of_the_proxy_does_not_hold_it(self):
        c = self._use_every_secret()
        c.request("DELETE", "/v1/secrets/RT2")
        forms = [f for secret in (GH_SECRET, KEY_SECRET, RUNTIME_SECRET) for f in every_form(secret)]
        if self.proxy.sanitized():
            # A sanitizer's allocator maps terabytes that gcore would write out whole (one run
            # filled a disk): read what a core holds instead, every resident page of every
            # mapping a core dump includes (readable, not marked dd). The sanitizer runtime
            # copies /proc/self/environ before main runs, so the from-env variable's text
            # is there as NAME=VALUE: that copy (only) is not ours to wipe.
            pages, found = resident_dumpable_memory(self.proxy.proc.pid, forms,
                                                    excused=b"VIBEPIT_IT_GH=")
            self.assertGreater(pages, 256)
            self.assertEqual(found, [], "the proxy's dumpable memory holds a form of a secret")
            self.assertTrue(self.proxy.alive())
            return
        if not shutil.which("gcore"):
            self.fail("gcore is missing: install gdb (scripts/install-deps.sh test)")
        prefix = os.path.join(self.topo.tmp, "proxy-core")
        pid = self.proxy.proc.pid
        r = subprocess.run(["gcore", "-o", prefix, str(pid)], capture_output=True, timeout=120)
        cores = glob.glob(prefix + ".*")
        self.assertTrue(cores, "gcore made no core: %s" % r.stderr.decode(errors="replace")[-2000:])
        try:
            with open(cores[0], "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as core:
                self.assertGreater(len(core), 1 << 20)
                # The core is of the right process: it holds text the proxy surely has in memory.
                self.assertNotEqual(core.find(b"allowed.test"), -1)
                for form in forms:
                    self.assertEqual(core.find(form), -1, "the core dump holds a form of %s" % form)
            self.assertTrue(self.proxy.alive())
        finally:
            for p in cores:
                os.unlink(p)


def contains(data, needle, excused):
    """Whether `needle` is in `data` other than right after `excused`."""
    i = data.find(needle)
    while i != -1:
        if data[max(0, i - len(excused)):i] != excused:
            return True
        i = data.find(needle, i + 1)
    return False


def resident_dumpable_memory(pid, needles, excused=b"\0"):
    """Scan every resident page of every mapping a core dump of `pid` holds (readable, not
    VmFlags dd) for `needles`, except where `excused` comes just before one. Returns (pages
    read, the needles found)."""
    page = os.sysconf("SC_PAGE_SIZE")
    maps = []
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                maps.append({"lo": lo, "hi": hi, "perm": line.split()[1], "rss": 0, "flags": []})
            elif line.startswith("Rss:"):
                maps[-1]["rss"] = int(line.split()[1])
            elif line.startswith("VmFlags:"):
                maps[-1]["flags"] = line.split()[1:]
    pages, found = 0, set()
    overlap = max(len(n) for n in needles)
    with open("/proc/%d/pagemap" % pid, "rb") as pagemap, open("/proc/%d/mem" % pid, "rb") as mem:
        for m in maps:
            if "r" not in m["perm"] or "dd" in m["flags"] or m["rss"] == 0:
                continue
            first, last = m["lo"] // page, m["hi"] // page
            run_start, tail = None, b""
            for chunk in range(first, last, 1 << 16):
                n = min(1 << 16, last - chunk)
                pagemap.seek(chunk * 8)
                entries = array.array("Q", pagemap.read(n * 8))
                for i, e in enumerate(entries + array.array("Q", [0])):
                    present = i < len(entries) and (e >> 63) & 1
                    if present and run_start is None:
                        run_start = chunk + i
                    elif not present and run_start is not None:
                        mem.seek(run_start * page)
                        try:
                            data = tail + mem.read((chunk + i - run_start) * page)
                        except OSError:
                            data = b""
                        pages += (chunk + i - run_start)
                        found.update(nd for nd in needles if contains(data, nd, excused))
                        tail, run_start = data[-overlap:], None
    return pages, sorted(found)


if __name__ == "__main__":
    base.main()
