"""Tenants of a shared gateway (docs/fleet.md): every request proves its tenant with
Proxy-Authorization: Basic, or is answered 407 and dials nothing; a tenant's request is decided
by the top-level rules plus its own, never another tenant's; records name the tenant and never
a token; tokens come from files only and are re-read on SIGHUP; the DNS server answers the
union of every tenant's names unless dns-tenants ties a source range to one."""

import base64
import json
import os
import signal
import subprocess

from tests.integration.harness import base
from tests.integration.harness.client import RawConn
from tests.integration.harness.dns_case import DIG_TIMEOUT, DigResult
from tests.integration.harness.proxy import Proxy
from tests.integration.harness.wait import LIVENESS_S, poll

ALPHA_TOKEN = "alpha-7Qm2ZkV9xR4tLw8N-token"
BETA_TOKEN = "beta-Hs3Jd9Pq1Vb6Yc2X-token"
NEW_ALPHA_TOKEN = "alpha-Lf5Gh8Kd2Mn7Pq4W-rotated"


def basic(user, token):
    return "Basic " + base64.b64encode(("%s:%s" % (user, token)).encode()).decode()


def every_form(token):
    """The byte strings that would betray `token`: as given, and base64'd after a user."""
    out = [token.encode()]
    for user in ("alpha", "beta"):
        out.append(base64.b64encode(("%s:%s" % (user, token)).encode()))
    return out


def get(url, host, auth=None):
    extra = "Proxy-Authorization: %s\r\n" % auth if auth else ""
    return "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (url, host, extra)


class TenantCase(base.TopologyCase):
    """A topology with the two tenants' token files; proxies made by tenant_proxy()."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.alpha_file = os.path.join(cls.topo.tmp, "alpha.token")
        cls.beta_file = os.path.join(cls.topo.tmp, "beta.token")
        for path, token in ((cls.alpha_file, ALPHA_TOKEN), (cls.beta_file, BETA_TOKEN)):
            with open(path, "w") as f:
                f.write(token + "\n")
            os.chmod(path, 0o600)

    @classmethod
    def tenant_config(cls, **overrides):
        cfg = {
            "allow_http": ["dual.test:80"],
            "allow_dns": ["dual.test"],
            "dns_listen": ["127.0.0.1:0"],
            "tenants": [
                {"name": "alpha", "token-file": cls.alpha_file,
                 "allow-http": ["allowed.test:80", "allowed.test:8443"],
                 "allow-dns": ["allowed.test"]},
                {"name": "beta", "token-file": cls.beta_file,
                 "allow-http": ["third.test:80"], "allow-dns": ["third.test"]},
            ],
        }
        cfg.update(overrides)
        return cfg

    def as_tenant(self, user, token, url, tunnel=False, proxy=None):
        args = ["--proxy-user", "%s:%s" % (user, token)] if user else []
        return self.curl(*(args + [url]), tunnel=tunnel, proxy=proxy)

    def dig_from(self, proxy, source, name):
        argv = ["dig", "-r", "@127.0.0.1", "-p", str(proxy.dns_port), "-b", source, name, "A",
                "+tries=1", "+time=%d" % DIG_TIMEOUT, "+notcp"]
        proc = self.topo.run(self.topo.px, argv, timeout=DIG_TIMEOUT + 10)
        return DigResult(argv, proc, 0)


class TenantsTest(TenantCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        try:
            cls.proxy_config = cls.tenant_config()
            cls.proxy = cls.make_proxy(**cls.proxy_config)
        except BaseException:
            cls.tearDownClass()
            raise

    def test_each_tenant_reaches_the_shared_hosts_and_its_own_only(self):
        cases = [  # user, token, url, tunnel, status
            ("alpha", ALPHA_TOKEN, "http://allowed.test/a", False, 200),
            ("alpha", ALPHA_TOKEN, "http://allowed.test:8443/a", True, 200),
            ("alpha", ALPHA_TOKEN, "http://third.test/a", False, 403),
            ("alpha", ALPHA_TOKEN, "http://dual.test/a", False, 200),
            ("beta", BETA_TOKEN, "http://third.test/b", False, 200),
            ("beta", BETA_TOKEN, "http://allowed.test/b", False, 403),
            ("beta", BETA_TOKEN, "http://allowed.test:8443/b", True, 403),
            ("beta", BETA_TOKEN, "http://dual.test/b", False, 200),
        ]
        for user, token, url, tunnel, status in cases:
            with self.subTest(user=user, url=url, tunnel=tunnel):
                r = self.as_tenant(user, token, url, tunnel=tunnel)
                code = r.connect_code if tunnel and status != 200 else r.http_code
                self.assertEqual(code, status, "%r%s" % (r, self.diag()))
        recs = self.proxy.wait_records(lambda r: r.get("event") == "decision" and r.get("tenant"),
                                       count=len(cases))
        by = {(r["tenant"], r["method"], r["host"], r["port"]): r for r in recs}
        self.assertEqual(by[("alpha", "GET", "allowed.test", 80)]["rule"], "allowed.test:80")
        self.assertEqual(by[("alpha", "CONNECT", "allowed.test", 8443)]["verdict"], "allow")
        self.assertEqual(by[("alpha", "GET", "third.test", 80)]["reason"], "not_allowlisted")
        self.assertEqual(by[("beta", "CONNECT", "allowed.test", 8443)]["verdict"], "deny")
        self.assertEqual(by[("beta", "GET", "dual.test", 80)]["rule"], "dual.test:80")

    def test_no_or_wrong_credentials_get_407_and_dial_nothing(self):
        before = len(self.topo.upstream_connections())
        attempts = {
            "none": None,
            "wrong token": basic("alpha", BETA_TOKEN),
            "no such tenant": basic("gamma", ALPHA_TOKEN),
            "token cut short": basic("alpha", ALPHA_TOKEN[:-1]),
            "token with more": basic("alpha", ALPHA_TOKEN + "x"),
            "another scheme": "Bearer " + ALPHA_TOKEN,
            "not base64": "Basic %%%%",
        }
        for what, auth in attempts.items():
            for connect in (False, True):
                with self.subTest(what=what, connect=connect):
                    c = RawConn(self.topo, self.proxy.port)
                    self.addCleanup(c.close)
                    if connect:
                        extra = "Proxy-Authorization: %s\r\n" % auth if auth else ""
                        resp = c.request("CONNECT allowed.test:8443 HTTP/1.1\r\nHost: "
                                         "allowed.test:8443\r\n%s\r\n" % extra, "CONNECT")
                    else:
                        resp = c.request(get("http://allowed.test/x", "allowed.test", auth))
                    self.assertStatus(resp, 407)
                    self.assertEqual(resp.header("proxy-authenticate"), 'Basic realm="vibepit"')
                    self.assertIn("http://NAME:TOKEN@host:port", resp.text)
                    self.assertTrue(c.closed_by_peer(), "a 407 closes the connection")
        # Two Proxy-Authorization fields, even both valid: which one is meant is not guessed.
        c = RawConn(self.topo, self.proxy.port)
        self.addCleanup(c.close)
        two = ("GET http://allowed.test/x HTTP/1.1\r\nHost: allowed.test\r\n"
               "Proxy-Authorization: %s\r\nProxy-Authorization: %s\r\n\r\n"
               % (basic("alpha", ALPHA_TOKEN), basic("alpha", ALPHA_TOKEN)))
        self.assertStatus(c.request(two), 407)
        self.assertEqual(len(self.topo.upstream_connections()), before, "a refused request dialled")
        recs = self.proxy.wait_records(lambda r: r.get("reason") == "unauthenticated",
                                       count=2 * len(attempts) + 1)
        for r in recs:
            self.assertEqual((r["verdict"], r["status"]), ("deny", 407), r)
            self.assertNotIn("tenant", r)
        # curl, told of the realm, answers with the credentials it was given.
        r = self.curl("--proxy-anyauth", "--proxy-user", "alpha:" + ALPHA_TOKEN,
                      "http://allowed.test/anyauth")
        self.assertEqual(r.http_code, 200, "%r%s" % (r, self.diag()))

    def test_every_request_of_a_kept_alive_connection_proves_its_tenant(self):
        c = RawConn(self.topo, self.proxy.port)
        self.addCleanup(c.close)
        self.assertStatus(c.request(get("http://allowed.test/1", "allowed.test",
                                        basic("alpha", ALPHA_TOKEN))), 200)
        # The same connection as beta: beta's rules decide, not alpha's.
        self.assertStatus(c.request(get("http://third.test/2", "third.test",
                                        basic("beta", BETA_TOKEN))), 200)
        self.assertStatus(c.request(get("http://allowed.test/3", "allowed.test",
                                        basic("beta", BETA_TOKEN))), 403)
        # And with no credentials at all: 407, whatever came before.
        self.assertStatus(c.request(get("http://allowed.test/4", "allowed.test")), 407)

    def test_tokens_are_in_no_record_log_argument_or_environment(self):
        self.assertEqual(self.as_tenant("alpha", ALPHA_TOKEN, "http://allowed.test/t").http_code, 200)
        self.assertEqual(self.as_tenant("beta", ALPHA_TOKEN, "http://third.test/t").http_code, 407)
        self.proxy.wait_records(lambda r: r.get("reason") == "unauthenticated")
        pid = self.proxy.proc.pid
        places = {"decision log": self.proxy.log_path, "stderr": self.proxy.stderr_path,
                  "config": self.proxy.config_path,
                  "cmdline": "/proc/%d/cmdline" % pid, "environ": "/proc/%d/environ" % pid}
        for name, path in places.items():
            with open(path, "rb") as f:
                data = f.read()
            for token in (ALPHA_TOKEN, BETA_TOKEN):
                for form in every_form(token):
                    self.assertNotIn(form, data, "%s holds a token" % name)

    def test_dns_answers_every_tenants_names_without_ranges(self):
        for name, status in (("allowed.test", "NOERROR"), ("third.test", "NOERROR"),
                             ("dual.test", "NOERROR"), ("other.test", "REFUSED")):
            with self.subTest(name=name):
                r = self.dig_from(self.proxy, "127.0.0.1", name)
                self.assertEqual(r.status, status, r)
        recs = self.proxy.wait_dns_records(lambda r: r.get("qname") == "third.test")
        self.assertNotIn("tenant", recs[0], "the server cannot know a tenant without ranges")


class TenantRangesTest(TenantCase):
    """Per-test proxies: dns-tenants, SIGHUP, configuration errors."""

    def test_dns_tenants_ties_source_ranges_to_one_tenant(self):
        p = self.start_proxy(**self.tenant_config(
            dns_tenants={"127.0.0.2/32": "alpha", "127.0.0.0/29": "beta"}))
        cases = [  # source, name, status
            ("127.0.0.2", "allowed.test", "NOERROR"),   # alpha's own (the /32 is narrower)
            ("127.0.0.2", "third.test", "REFUSED"),
            ("127.0.0.2", "dual.test", "NOERROR"),      # the top level's
            ("127.0.0.3", "third.test", "NOERROR"),     # beta, by the /29
            ("127.0.0.3", "allowed.test", "REFUSED"),
            ("127.0.0.9", "dual.test", "NOERROR"),      # in no range: the top level only
            ("127.0.0.9", "allowed.test", "REFUSED"),
            ("127.0.0.9", "third.test", "REFUSED"),
        ]
        for source, name, status in cases:
            with self.subTest(source=source, name=name):
                self.assertEqual(self.dig_from(p, source, name).status, status)
        recs = p.wait_dns_records(lambda r: r.get("qname") == "allowed.test", count=3)
        self.assertEqual([r.get("tenant") for r in recs], ["alpha", "beta", None])

    def test_sighup_rereads_the_token_files(self):
        token_file = os.path.join(self.topo.tmp, "rotating.token")
        with open(token_file, "w") as f:
            f.write(ALPHA_TOKEN)
        cfg = self.tenant_config()
        cfg["tenants"][0]["token-file"] = token_file
        p = self.start_proxy(**cfg)
        self.assertEqual(self.as_tenant("alpha", ALPHA_TOKEN, "http://allowed.test/", proxy=p)
                         .http_code, 200)
        # A token that is no token (too short) changes nothing: the old one stays.
        with open(token_file, "w") as f:
            f.write("short")
        p.proc.send_signal(signal.SIGHUP)
        poll(p.stderr, lambda err: "tokens not re-read" in err, timeout=LIVENESS_S)
        self.assertNotIn("short", p.stderr().split("tokens not re-read")[1].splitlines()[0])
        self.assertEqual(self.as_tenant("alpha", ALPHA_TOKEN, "http://allowed.test/", proxy=p)
                         .http_code, 200)
        # A kept-alive connection that proved the old token, whose next request sends it again.
        kept = RawConn(self.topo, p.port)
        self.addCleanup(kept.close)
        self.assertStatus(kept.request(get("http://allowed.test/k1", "allowed.test",
                                           basic("alpha", ALPHA_TOKEN))), 200, p)

        def rotate(text, times):
            with open(token_file + ".new", "w") as f:
                f.write(text)
            os.rename(token_file + ".new", token_file)
            p.proc.send_signal(signal.SIGHUP)
            poll(p.stderr, lambda err: err.replace("not re-read", "").count("tokens re-read") == times,
                 timeout=LIVENESS_S)

        # The rotation's first step: the new token beside the old one, and both prove alpha,
        # the kept-alive connection's old one too.
        rotate(NEW_ALPHA_TOKEN + "\n" + ALPHA_TOKEN + "\n", 1)
        self.assertStatus(kept.request(get("http://allowed.test/k2", "allowed.test",
                                           basic("alpha", ALPHA_TOKEN))), 200, p)
        for token in (ALPHA_TOKEN, NEW_ALPHA_TOKEN):
            self.assertEqual(self.as_tenant("alpha", token, "http://allowed.test/", proxy=p)
                             .http_code, 200)
        # Its end: the new one alone.
        rotate(NEW_ALPHA_TOKEN + "\n", 2)
        self.assertStatus(kept.request(get("http://allowed.test/k3", "allowed.test",
                                           basic("alpha", ALPHA_TOKEN))), 407, p)
        self.assertEqual(self.as_tenant("alpha", ALPHA_TOKEN, "http://allowed.test/", proxy=p)
                         .http_code, 407)
        self.assertEqual(self.as_tenant("alpha", NEW_ALPHA_TOKEN, "http://allowed.test/", proxy=p)
                         .http_code, 200)
        self.assertEqual(self.as_tenant("beta", BETA_TOKEN, "http://third.test/", proxy=p)
                         .http_code, 200)

    def test_bad_tenant_configuration_stops_the_start_with_the_reason(self):
        short = os.path.join(self.topo.tmp, "short.token")
        with open(short, "w") as f:
            f.write("0123456789")
        three = os.path.join(self.topo.tmp, "three.token")
        with open(three, "w") as f:
            f.write("".join("%d123456789abcdef\n" % i for i in range(3)))
        good = self.tenant_config()["tenants"]
        cases = [  # (overrides, words the error must hold)
            ({"tenants": []}, "tenants"),
            ({"tenants": [{"name": "a b", "token-file": self.alpha_file}]}, "letters"),
            ({"tenants": [{"name": "a", "token-file": "relative"}]}, "absolute"),
            ({"tenants": [{"name": "a", "token-file": self.alpha_file, "token": "x"}]},
             "unknown key"),
            ({"tenants": good + [dict(good[0])]}, "two tenants"),
            ({"tenants": [dict(good[0], **{"allow-http": ["*:80"]})]}, "tenant alpha allow-http"),
            ({"tenants": [{"name": "a", "token-file": short}]}, "at least 16"),
            ({"tenants": [{"name": "a", "token-file": three}]}, "more than 2 lines"),
            ({"tenants": [{"name": "a", "token-file": self.topo.tmp + "/none"}]}, "tenant a"),
            ({"dns_tenants": {"127.0.0.1/32": "gamma"}}, "no tenant is named"),
            ({"dns_tenants": {"127.0.0.1/8": "alpha"}}, "not a range"),
            ({"tenants": None, "dns_tenants": {"127.0.0.1/32": "alpha"}}, "needs key tenants"),
        ]
        for overrides, words in cases:
            with self.subTest(overrides=overrides):
                p = Proxy(self.topo, base.BIN_DIR, **self.tenant_config(**overrides))
                proc = p.spawn()
                try:
                    proc.wait(LIVENESS_S)
                except subprocess.TimeoutExpired:
                    p.stop(signal.SIGKILL)
                    self.fail("the proxy started with %s" % json.dumps(overrides))
                self.assertEqual(proc.returncode, 2, p.stderr())
                self.assertIn(words, p.stderr())
                self.assertNotIn("0123456789", p.stderr())


if __name__ == "__main__":
    base.main()
