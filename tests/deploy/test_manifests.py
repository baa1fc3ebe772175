"""The Kubernetes manifests (deploy/kubernetes, docs/fleet.md), rendered by `kubectl kustomize`
as a user renders them, validated against the Kubernetes API's schemas (kubernetes-models,
tests/deploy/schemas), and checked object by object (the YAML parsed, not grepped): the
gateway's hardening, replicas, anti-affinity, probes and resources; the Service's fixed
cluster IP and ports; the disruption budget; the NetworkPolicies; the hardened sandbox
template that names the gateway as its resolver and proxy; and the gateway's configuration,
which the real vibepit-proxy --check must accept.

    python3 -m tests.deploy.test_manifests [--bin-dir build/bin]"""

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from urllib.parse import urlsplit

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy", "kubernetes")
BIN_DIR = os.path.join(REPO, "build", "bin")
TENANTS = ("team-a", "team-b")
# Where scripts/install-deps.sh --test puts the schemas (tests/deploy/schemas), and the
# script that applies them.
SCHEMAS = os.path.join(os.environ.get("VIBEPIT_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vibepit"),
    "k8s-schemas", "node_modules")
VALIDATE = os.path.join(os.path.dirname(__file__), "schemas", "validate.js")


def validate(objects):
    """(exit status, output) of the schema validator over `objects`."""
    node = shutil.which("node")
    if node is None or not os.path.isdir(os.path.join(SCHEMAS, "kubernetes-models")):
        raise AssertionError("the Kubernetes schemas are not installed (node, and %s): run "
                             "scripts/install-deps.sh --test" % SCHEMAS)
    proc = subprocess.run([node, VALIDATE, SCHEMAS], input=json.dumps(objects),
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def render(kustomization_dir):
    """The objects `kubectl kustomize DIR` renders, in a copy of deploy/ with token files."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise AssertionError("kubectl is missing: Debian package kubernetes-client "
                             "(scripts/install-deps.sh --test)")
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "kubernetes")
        shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("tokens"))
        tokens = os.path.join(copy, "overlays", "example", "tokens")
        os.makedirs(tokens)
        for t in TENANTS:
            with open(os.path.join(tokens, t), "w") as f:
                f.write("test-token-of-%s-0123456789" % t)
        target = os.path.join(copy, os.path.relpath(kustomization_dir, DEPLOY))
        proc = subprocess.run([kubectl, "kustomize", target], capture_output=True, text=True,
                              timeout=120)
    if proc.returncode != 0:
        raise AssertionError("kubectl kustomize %s failed:\n%s" % (kustomization_dir, proc.stderr))
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(objects, kind, name):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name)]
    if len(found) != 1:
        raise AssertionError("%d %s named %s*, want one" % (len(found), kind, name))
    return found[0]


class ManifestCase:
    """Checks shared by the base and the example overlay; `objects` is set by the class."""

    objects = None

    def gateway(self):
        return one(self.objects, "Deployment", "vibepit-gateway")

    def assertHardenedPod(self, spec, where):
        self.assertIs(spec.get("automountServiceAccountToken"), False, where)
        pod = spec.get("securityContext", {})
        self.assertIs(pod.get("runAsNonRoot"), True, where)
        self.assertNotEqual(pod.get("runAsUser", 0), 0, where)
        self.assertEqual(pod.get("seccompProfile", {}).get("type"), "RuntimeDefault", where)
        self.assertFalse(spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"), where)
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            self.assertIs(sc.get("readOnlyRootFilesystem"), True, "%s %s" % (where, c["name"]))
            self.assertIs(sc.get("allowPrivilegeEscalation"), False, "%s %s" % (where, c["name"]))
            self.assertFalse(sc.get("privileged", False), where)
            self.assertEqual(sc.get("capabilities", {}).get("drop"), ["ALL"], where)
            self.assertFalse(sc.get("capabilities", {}).get("add"), where)
            res = c.get("resources", {})
            self.assertTrue(res.get("requests", {}).get("cpu") and res["requests"].get("memory"),
                            "%s %s: requests" % (where, c["name"]))
            self.assertTrue(res.get("limits", {}).get("memory"), "%s %s: a memory limit" % (where, c["name"]))

    def test_the_gateway_is_hardened_replicated_and_probed(self):
        d = self.gateway()
        self.assertGreaterEqual(d["spec"]["replicas"], 2)
        spec = d["spec"]["template"]["spec"]
        self.assertHardenedPod(spec, "gateway")
        labels = d["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(d["spec"]["selector"]["matchLabels"], labels)
        anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        self.assertTrue(any(t["topologyKey"] == "kubernetes.io/hostname" and
                            t["labelSelector"]["matchLabels"] == labels for t in anti))
        (c,) = spec["containers"]
        ports = {p["name"]: (p["containerPort"], p.get("protocol", "TCP")) for p in c["ports"]}
        self.assertTrue(all(port > 1023 for port, _ in ports.values()), "no capability to bind")
        for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path)
            self.assertEqual(ports[get["port"]], (8081, "TCP"))
        # The rules and tokens arrive as whole volumes: a subPath mount never sees an update.
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertNotIn("subPath", mounts["rules"])
        self.assertNotIn("subPath", mounts["tokens"])
        self.assertIn("configMap", volumes["rules"])
        self.assertIn("secret", volumes["tokens"])
        for m in mounts.values():
            self.assertIs(m.get("readOnly"), True, m)
        self.assertGreater(spec["terminationGracePeriodSeconds"] * 1000, self.config()["drain-timeout-ms"])
        strategy = d["spec"]["strategy"]["rollingUpdate"]
        self.assertEqual(strategy["maxUnavailable"], 0)

    def config(self):
        cm = one(self.objects, "ConfigMap", "vibepit-gateway-config")
        return json.loads(cm["data"]["config.json"])

    def service(self):
        return one(self.objects, "Service", "vibepit-gateway")

    def test_the_service_has_a_fixed_cluster_ip_for_dns_and_the_proxy(self):
        s = self.service()
        ipaddress.ip_address(s["spec"]["clusterIP"])   # a fixed address, not None or ""
        ports = {(p["port"], p["protocol"]): p["targetPort"] for p in s["spec"]["ports"]}
        self.assertEqual(set(ports), {(53, "UDP"), (53, "TCP"), (3128, "TCP")})
        container = {p["name"]: p for p in self.gateway()["spec"]["template"]["spec"]["containers"][0]["ports"]}
        for (port, proto), target in ports.items():
            self.assertEqual(container[target]["protocol"], proto)
        self.assertEqual(s["spec"]["selector"], self.gateway()["spec"]["selector"]["matchLabels"])

    def test_a_disruption_budget_keeps_one_serving(self):
        pdb = one(self.objects, "PodDisruptionBudget", "vibepit-gateway")
        self.assertGreaterEqual(pdb["spec"]["minAvailable"], 1)
        self.assertLess(pdb["spec"]["minAvailable"], self.gateway()["spec"]["replicas"])
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"],
                         self.gateway()["spec"]["selector"]["matchLabels"])

    def test_sandboxes_may_reach_the_gateways_dns_and_proxy_ports_only(self):
        pol = one(self.objects, "NetworkPolicy", "vibepit-sandbox-egress")
        sandboxes = pol["metadata"]["namespace"]
        self.assertEqual(pol["spec"]["podSelector"], {}, "every pod of the namespace")
        self.assertEqual(set(pol["spec"]["policyTypes"]), {"Ingress", "Egress"})
        self.assertFalse(pol["spec"].get("ingress"), "nothing may reach a sandbox")
        (rule,) = pol["spec"]["egress"]
        (peer,) = rule["to"]
        gw = self.gateway()
        self.assertEqual(peer["namespaceSelector"]["matchLabels"],
                         {"kubernetes.io/metadata.name": gw["metadata"]["namespace"]})
        self.assertEqual(peer["podSelector"]["matchLabels"], gw["spec"]["selector"]["matchLabels"])
        self.assertNotIn("ipBlock", peer)
        got = {(p["port"], p["protocol"]) for p in rule["ports"]}
        self.assertEqual(got, {(5353, "UDP"), (5353, "TCP"), (3128, "TCP")})
        # The gateway's ingress policy admits the sandboxes' namespace on the same ports.
        ing = one(self.objects, "NetworkPolicy", "vibepit-gateway-ingress")
        self.assertEqual(ing["spec"]["podSelector"]["matchLabels"], gw["spec"]["selector"]["matchLabels"])
        ns = one(self.objects, "Namespace", sandboxes)
        from_sandboxes = [r for r in ing["spec"]["ingress"]
                          if any(f.get("namespaceSelector", {}).get("matchLabels", {}).items()
                                 <= ns["metadata"]["labels"].items() and f.get("namespaceSelector")
                                 for f in r.get("from", []))]
        self.assertEqual({(p["port"], p["protocol"]) for p in from_sandboxes[0]["ports"]}, got)
        for r in ing["spec"]["ingress"]:
            if not r.get("from"):   # open to all: the health port only
                self.assertEqual([p["port"] for p in r["ports"]], [8081])
        self.assertEqual(ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce"), "restricted")

    def test_the_sandbox_template_is_hardened_and_uses_the_gateway(self):
        t = one(self.objects, "PodTemplate", "vibepit-sandbox")
        spec = t["template"]["spec"]
        self.assertHardenedPod(spec, "sandbox")
        ip = self.service()["spec"]["clusterIP"]
        self.assertEqual(spec["dnsPolicy"], "None")
        self.assertEqual(spec["dnsConfig"]["nameservers"], [ip])
        (c,) = spec["containers"]
        env = {e["name"]: e for e in c["env"]}
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            url = urlsplit(env[name]["value"])
            self.assertEqual((url.hostname, url.port), (ip, 3128), name)
            self.assertEqual((url.username, url.password), ("$(VIBEPIT_TENANT)", "$(VIBEPIT_TOKEN)"))
        self.assertIn("secretKeyRef", env["VIBEPIT_TOKEN"]["valueFrom"])
        self.assertIn(env["VIBEPIT_TENANT"]["value"], [t["name"] for t in self.config()["tenants"]])
        writable = {m["mountPath"] for m in c["volumeMounts"]}
        self.assertIn("/tmp", writable)

    def test_every_object_is_valid_against_the_kubernetes_schemas(self):
        status, out = validate(self.objects)
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count(": valid"), len(self.objects), out)
        # The validator is not a yes-man: a wrong type and a wrong enum value are refused.
        broken = json.loads(json.dumps(self.objects))
        for o in broken:
            if o["kind"] == "Deployment":
                o["spec"]["replicas"] = "two"
            if o["kind"] == "Service":
                o["spec"]["ports"][0]["protocol"] = "ICMP"
        status, out = validate(broken)
        self.assertEqual(status, 1, out)
        self.assertIn("replicas must be integer", out)
        self.assertIn("protocol must be equal to one of the allowed values", out)

    def test_the_gateway_configuration_passes_vibepit_proxy_check(self):
        binary = os.path.join(BIN_DIR, "vibepit-proxy")
        if not os.access(binary, os.X_OK):
            self.fail("no vibepit-proxy in %s (--bin-dir)" % BIN_DIR)
        cfg = self.config()
        with tempfile.TemporaryDirectory() as tmp:
            # The paths the pod mounts, moved under tmp; everything else as deployed.
            for t in cfg["tenants"]:
                path = os.path.join(tmp, t["name"])
                with open(path, "w") as f:
                    f.write("test-token-of-%s-0123456789" % t["name"])
                t["token-file"] = path
            rules_cm = [o for o in self.objects if o["kind"] == "ConfigMap"
                        and o["metadata"]["name"].startswith("vibepit-rules")]
            rules = os.path.join(tmp, "rules.yaml")
            with open(rules, "w") as f:
                f.write(rules_cm[0]["data"]["rules.yaml"] if rules_cm else "")
            cfg["rules-file"] = rules
            cfg["upstream-dns"] = ["127.0.0.1:53"]   # --check reads no resolv.conf then
            path = os.path.join(tmp, "config.json")
            with open(path, "w") as f:
                json.dump(cfg, f)
            proc = subprocess.run([binary, "--check", "--config", path], capture_output=True,
                                  text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("configuration OK", proc.stdout)


class ExampleOverlayTest(ManifestCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = render(os.path.join(DEPLOY, "overlays", "example"))

    def test_the_overlay_sets_the_image_replicas_tokens_and_rules(self):
        c = self.gateway()["spec"]["template"]["spec"]["containers"][0]
        self.assertTrue(c["image"].startswith("registry.example.com/"), c["image"])
        self.assertEqual(self.gateway()["spec"]["replicas"], 3)
        secret = one(self.objects, "Secret", "vibepit-tenant-tokens")
        self.assertEqual(sorted(secret["data"]), sorted(TENANTS))
        # Its name does not change with the tokens: a rotation updates the mounted files in
        # place (the gateway watches them) instead of rolling the gateway.
        self.assertEqual(secret["metadata"]["name"], "vibepit-tenant-tokens")
        volume = [v for v in self.gateway()["spec"]["template"]["spec"]["volumes"] if v["name"] == "tokens"][0]
        self.assertEqual(volume["secret"]["secretName"], secret["metadata"]["name"])
        rules = yaml.safe_load(one(self.objects, "ConfigMap", "vibepit-rules")["data"]["rules.yaml"])
        self.assertEqual(sorted(rules["tenants"]), sorted(TENANTS))


class BaseTest(ManifestCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = render(os.path.join(DEPLOY, "base"))


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--bin-dir" in args:
        i = args.index("--bin-dir")
        BIN_DIR = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    unittest.main(argv=[sys.argv[0]] + args, verbosity=2)
