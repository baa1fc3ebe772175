"""A shared gateway on a real engine (docs/fleet.md): two vibepit-proxy replicas, each
dual-homed on an internal network and the fake internet, serve three sandbox containers of two
tenants; each sandbox reaches only its own tenant's hosts and the shared ones, resolves only
its tenant's names (dns-tenants by address), and a change of the rules file both replicas
mount reaches both. Docker only: the containers are made here with the docker CLI, not by
vibepit, so that the engine's differences (tested elsewhere) stay out of it."""

import json
import os
import shutil
import tempfile
import time
import unittest

from tests.e2e import e2e_harness as h

PROXY_IMAGE = "vibepit-e2e-fleet-proxy:%d" % os.getpid()
BUSYBOX = "vibepit-e2e-fleet-busybox:%d" % os.getpid()
INTERNAL = "vpfleet%d" % os.getpid()
SUBNET = "203.0.113.0/24"
REPLICAS = {"gw1": "203.0.113.2", "gw2": "203.0.113.3"}
SANDBOXES = {  # name: (tenant, address); the addresses fall in dns-tenants' ranges
    "a1": ("team-a", "203.0.113.10"),
    "a2": ("team-a", "203.0.113.11"),
    "b1": ("team-b", "203.0.113.20"),
}
TOKENS = {"team-a": "fleet-token-of-team-a-6Hk2Qm9Z", "team-b": "fleet-token-of-team-b-Lp4Xw7Rc"}
RULES_V1 = """allow-http: [dual.test:80]
tenants:
  team-a:
    allow-http: [allowed.test:80]
    allow-dns: [allowed.test]
  team-b:
    allow-http: [other.test:80]
    allow-dns: [other.test]
"""
RULES_V2 = RULES_V1.replace("allow-http: [other.test:80]", "allow-http: [other.test:80, third.test:80]")
INTERNET = None
WORK = None


def docker(*args, check=True, timeout=120):
    return h.sh("docker", *args, check=check, timeout=timeout)


def label():
    return "%s=%d" % (h.TEST_LABEL, os.getpid())


def build_images(ctx):
    """The proxy image as vibepit run makes it (FROM scratch: the binary and the shared objects
    it loads, user 65532), and a FROM scratch busybox for the sandboxes."""
    proxy = os.path.join(ctx, "proxy")
    binary = os.path.join(h.BIN, "vibepit-proxy")
    for what, where in [(binary, "/usr/local/bin/vibepit-proxy")] + \
            [(lib, lib) for lib in h.shared_objects(binary)]:
        dst = os.path.join(proxy, "rootfs") + where
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(what, dst)
    with open(os.path.join(proxy, "Dockerfile"), "w") as f:
        f.write('FROM scratch\nCOPY rootfs/ /\nUSER 65532:65532\n'
                'ENTRYPOINT ["/usr/local/bin/vibepit-proxy"]\n')
    box = os.path.join(ctx, "busybox")
    os.makedirs(box)
    shutil.copy2(h.need("busybox"), os.path.join(box, "busybox"))
    with open(os.path.join(box, "Dockerfile"), "w") as f:
        f.write('FROM scratch\nCOPY busybox /bin/busybox\n'
                'RUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["/bin/sh"]\n')
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    for tag, d in ((PROXY_IMAGE, proxy), (BUSYBOX, box)):
        h.sh("docker", "build", "-q", "--label", label(), "-t", tag, d, env=env, timeout=300)


def setUpModule():
    global INTERNET, WORK
    if h.ENGINE != "docker":
        raise RuntimeError("e2e.fleet makes its containers with the docker CLI: Docker only")
    if not h.docker_ready():
        raise RuntimeError("no Docker engine answers (scripts/test.sh starts one)")
    WORK = tempfile.mkdtemp(prefix="vpe2e-fleet-")
    os.chmod(WORK, 0o755)
    build_images(os.path.join(WORK, "ctx"))
    INTERNET = h.FakeInternet().start()
    docker("network", "create", "--internal", "--subnet", SUBNET, "--label", label(), INTERNAL)


def tearDownModule():
    docker("rm", "-f", *(["vpfleet-%s-%d" % (n, os.getpid()) for n in list(REPLICAS) + list(SANDBOXES)]),
           check=False)
    docker("network", "rm", INTERNAL, check=False)
    if INTERNET:
        INTERNET.close()
    docker("image", "rm", "-f", PROXY_IMAGE, BUSYBOX, check=False)
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def container(name):
    return "vpfleet-%s-%d" % (name, os.getpid())


class FleetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # What both replicas mount read-only: the config, the tokens, and the rules' directory.
        etc = os.path.join(WORK, "etc")
        os.makedirs(os.path.join(etc, "rules"))
        os.makedirs(os.path.join(etc, "tokens"))
        for t, token in TOKENS.items():
            path = os.path.join(etc, "tokens", t)
            with open(path, "w") as f:
                f.write(token + "\n")
            os.chmod(path, 0o644)   # the proxy's user 65532 reads it through the bind mount
        cls.rules = os.path.join(etc, "rules", "rules.yaml")
        with open(cls.rules, "w") as f:
            f.write(RULES_V1)
        config = {
            "proxy-listen": ["0.0.0.0:3128"], "dns-listen": ["0.0.0.0:53"],
            "upstream-dns": [INTERNET.dns_addr], "decision-log": "-", "log-format": "json",
            "health-listen": ["127.0.0.1:8081"], "rules-file": "/etc/vibepit/rules/rules.yaml",
            "tenants": [{"name": t, "token-file": "/etc/vibepit/tokens/" + t} for t in TOKENS],
            "dns-tenants": {"203.0.113.8/29": "team-a", "203.0.113.16/28": "team-b"},
        }
        with open(os.path.join(etc, "config.json"), "w") as f:
            json.dump(config, f)
        for name, ip in REPLICAS.items():
            docker("create", "--name", container(name), "--label", label(),
                   "--network", INTERNET.name, "--read-only", "--cap-drop", "ALL",
                   "--security-opt", "no-new-privileges",
                   "--sysctl", "net.ipv4.ip_unprivileged_port_start=53",
                   "-v", "%s:/etc/vibepit:ro" % etc, PROXY_IMAGE,
                   "--config", "/etc/vibepit/config.json")
            docker("network", "connect", "--ip", ip, INTERNAL, container(name))
            docker("start", container(name))
        for name in REPLICAS:
            ok = h.wait_until(lambda n=name: "ready:" in docker("logs", container(n), check=False).stderr,
                              timeout=h.LIVENESS_S)
            if not ok:
                raise RuntimeError("%s did not start:\n%s" % (name, docker("logs", container(name)).stderr))
        for name, (tenant, ip) in SANDBOXES.items():
            docker("run", "-d", "--name", container(name), "--label", label(),
                   "--network", INTERNAL, "--ip", ip, "--read-only", "--cap-drop", "ALL",
                   "--security-opt", "no-new-privileges", "--user", "4242:4242",
                   "--dns", REPLICAS["gw1"], BUSYBOX, "sleep", "600")

    def fetch(self, sandbox, url, replica="gw1", tenant=None):
        """What `wget` in `sandbox` gets for `url` through `replica`, as its tenant (or as
        `tenant`, with that tenant's token; "" for no credentials): the HTTP status."""
        who = SANDBOXES[sandbox][0] if tenant is None else tenant
        auth = "%s:%s@" % (who, TOKENS[who]) if who else ""
        r = docker("exec", "-e", "http_proxy=http://%s%s:3128" % (auth, REPLICAS[replica]),
                   # busybox 1.35's wget crashes with -T: its applet timeout bounds it instead
                   container(sandbox), "timeout", "10", "wget", "-q", "-S", "-O", "/dev/null", url,
                   check=False, timeout=30)
        for line in (r.stdout + r.stderr).splitlines():
            words = line.split()
            if len(words) >= 2 and words[0].startswith("HTTP/1."):
                return int(words[1])
            if "server returned error: HTTP/1." in line:
                return int(line.split("HTTP/1.1 ")[1].split()[0])
        return 0

    def lookup(self, sandbox, name):
        r = docker("exec", container(sandbox), "nslookup", name, REPLICAS["gw1"], check=False,
                   timeout=30)
        return "Address" in r.stdout.split("Name:")[-1] if "Name:" in r.stdout else False

    def records(self, replica):
        out = []
        for line in docker("logs", container(replica)).stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def test_each_sandbox_reaches_its_own_tenants_hosts_only(self):
        cases = [  # sandbox, url, status
            ("a1", "http://allowed.test/", 200), ("a2", "http://allowed.test/", 200),
            ("b1", "http://allowed.test/", 403),
            ("b1", "http://other.test/", 200), ("a1", "http://other.test/", 403),
            ("a2", "http://other.test/", 403),
            ("a1", "http://dual.test/", 200), ("b1", "http://dual.test/", 200),
        ]
        for sandbox, url, status in cases:
            with self.subTest(sandbox=sandbox, url=url):
                self.assertEqual(self.fetch(sandbox, url), status)
        # Another tenant's token is no way in, and no token is none.
        self.assertEqual(self.fetch("b1", "http://allowed.test/", tenant=""), 407)
        self.assertEqual(self.fetch("a1", "http://allowed.test/", tenant="team-b"), 403)
        recs = [r for r in self.records("gw1") if r.get("event") == "decision" and r.get("src") == "proxy"]
        by_client = {}
        for r in recs:
            by_client.setdefault(r["client"].rsplit(":", 1)[0], set()).add(r.get("tenant"))
        self.assertEqual(by_client[SANDBOXES["a2"][1]], {"team-a"})
        self.assertIn(None, by_client[SANDBOXES["b1"][1]])   # the 407: no tenant recorded
        for r in recs:
            for token in TOKENS.values():
                self.assertNotIn(token, json.dumps(r))
        # DNS by source address: each sandbox resolves its tenant's names and the shared ones.
        self.assertTrue(self.lookup("a1", "allowed.test"))
        self.assertFalse(self.lookup("a1", "other.test"))
        self.assertTrue(self.lookup("b1", "other.test"))
        self.assertFalse(self.lookup("b1", "allowed.test"))

    def test_a_rules_file_change_reaches_both_replicas(self):
        for replica in REPLICAS:
            self.assertEqual(self.fetch("b1", "http://third.test/", replica), 403)
        with open(self.rules + ".new", "w") as f:
            f.write(RULES_V2)
        t0 = time.monotonic()
        os.rename(self.rules + ".new", self.rules)
        for replica in REPLICAS:
            ok = h.wait_until(lambda r=replica: self.fetch("b1", "http://third.test/", r) == 200,
                              timeout=h.LIVENESS_S)
            self.assertTrue(ok, "%s did not apply the new rules:\n%s" % (
                replica, docker("logs", container(replica)).stderr[-2000:]))
        took = time.monotonic() - t0
        self.assertLess(took, 5.0, "both replicas applied it within %.1f s" % took)
        for replica in REPLICAS:
            self.assertEqual(self.fetch("a1", "http://third.test/", replica), 403)
            logs = docker("logs", container(replica)).stderr
            self.assertIn("applied: generation", logs)


if __name__ == "__main__":
    h.main()
