"""Configuration errors, against the real vibepit-proxy: an invalid value, an unknown key,
malformed JSON and a missing file each stop it with exit status 2 and a message that names
the key, before it serves anything."""

import json
import signal

from tests.integration.harness import base
from tests.integration.harness.proxy import Proxy
from tests.integration.harness.wait import LIVENESS_S

RULES = ["allowed.test:443", "allowed.test:80"]


class ConfigErrorTest(base.TopologyCase):

    def run_config(self, raw, timeout=LIVENESS_S):
        p = Proxy(self.topo, base.BIN_DIR)
        proc = p.spawn(raw_config=raw)
        try:
            proc.wait(timeout)
        except Exception:
            p.stop(signal.SIGKILL)
            self.fail("proxy kept running with config %s" % raw)
        return proc.returncode, p.stderr()

    def with_key(self, **kv):
        p = Proxy(self.topo, base.BIN_DIR, allow_http=RULES)
        cfg = dict(p.config)
        for k, v in kv.items():
            cfg[k.replace("_", "-")] = v
        return json.dumps(cfg)

    def test_invalid_values_name_the_key(self):
        cases = [  # (key, bad value)
            ("allow-http", ["*:443"]),                 # bare *
            ("allow-http", ["allowed.test"]),          # no port
            ("allow-http", ["a*b.test:443"]),          # * inside a label
            ("allow-http", ["bad..test:443"]),         # empty label
            ("allow-http", ["10.0.0.1:443"]),          # literal in an always-blocked range
            ("allow-http", "allowed.test:443"),        # not a list
            ("allow-dns", ["*"]),
            ("proxy-listen", ["nope"]),
            ("proxy-listen", 3128),                    # a number (one string is fine)
            ("control-listen", ["0.0.0.0:8443"]),      # the control API on every interface
            ("upstream-dns", ["not-an-address"]),
            ("splice", "maybe"),
            ("threads", -1),
            ("connect-timeout-ms", "soon"),
            ("header-timeout-ms", -5),
            ("max-request-head", "big"),
            ("block-cidr", ["10.0.0.0/33"]),
            ("log-format", "xml"),
            ("health-listen", ["nope"]),
            ("rules-file", "relative/rules.yaml"),
            ("tenants", {"name": "a"}),
            ("dns-tenants", ["10.0.0.0/8"]),
        ]
        for key, value in cases:
            with self.subTest(key=key, value=value):
                status, err = self.run_config(self.with_key(**{key: value}))
                self.assertEqual(status, 2, err)
                self.assertIn(key, err)

    def test_unknown_key(self):
        status, err = self.run_config(self.with_key(**{"alow-http": ["allowed.test:443"]}))
        self.assertEqual(status, 2, err)
        self.assertIn("alow-http", err)

    def test_malformed_json_and_missing_file(self):
        status, err = self.run_config('{"allow-http": [')
        self.assertEqual(status, 2, err)
        p = Proxy(self.topo, base.BIN_DIR)
        proc = self.topo.popen(self.topo.px, [p.binary, "--config", "/nonexistent/vibepit.json"],
                               log="missing-config")
        proc.wait(5)
        self.assertEqual(proc.returncode, 2, self.topo.read_log("missing-config"))


if __name__ == "__main__":
    base.main()
