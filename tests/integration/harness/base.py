"""Shared test plumbing: --bin-dir, one topology per test class, proxies."""

import os
import sys
import unittest

from . import netns
from .client import RawConn, connect_tunnel, curl
from .proxy import Proxy
from .tools import MissingTool, need
from .wait import LIVENESS_S

SKIP = 77                 # ctest SKIP_RETURN_CODE
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN_DIR = None


def _take_bin_dir(argv):
    rest, bin_dir, i = [argv[0]], os.environ.get("VIBEPIT_BIN_DIR"), 1
    while i < len(argv):
        a = argv[i]
        if a == "--bin-dir" and i + 1 < len(argv):
            bin_dir, i = argv[i + 1], i + 2
            continue
        if a.startswith("--bin-dir="):
            bin_dir = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return bin_dir or os.path.join(REPO, "build", "bin"), rest


def main(needs_proxy=True):
    """Entry point of each test file: python3 test_x.py [--bin-dir DIR] [unittest args]."""
    global BIN_DIR
    BIN_DIR, argv = _take_bin_dir(sys.argv)
    BIN_DIR = os.path.abspath(BIN_DIR)
    if os.geteuid() != 0:
        print("SKIP: integration tests create network namespaces and need root")
        sys.exit(SKIP)
    try:
        for command in ("ip", "curl"):
            need(command)
    except MissingTool as e:
        print("FAIL: %s" % e)
        sys.exit(1)
    if needs_proxy and not os.access(os.path.join(BIN_DIR, "vibepit-proxy"), os.X_OK):
        print("SKIP: no vibepit-proxy in %s (use --bin-dir or VIBEPIT_BIN_DIR)" % BIN_DIR)
        sys.exit(SKIP)
    netns.install_signal_cleanup()
    unittest.main(argv=argv, verbosity=2)


class TopologyCase(unittest.TestCase):
    """One namespace topology per test class, and helpers to run proxies in it."""

    ipv6 = True
    proxy_config = None     # dict of overrides for the class-wide proxy, or None

    @classmethod
    def setUpClass(cls):
        cls.topo = netns.Topology(ipv6=cls.ipv6)
        cls.topo.start()
        cls.proxy = None
        cls.late_crashes, cls.last_test = [], None
        try:
            if cls.proxy_config is not None:
                cls.proxy = cls.make_proxy(**cls.proxy_config)
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        problems = list(cls.late_crashes)
        try:
            if cls.proxy is not None:
                problem = cls.proxy.shutdown_problem()
                if problem:
                    problems.append(problem)
        finally:
            cls.topo.close()
        if problems:
            raise AssertionError("class-wide vibepit-proxy: %s" % "\n".join(problems))

    def setUp(self):
        # A class-wide proxy that died after an earlier test finished is
        # reported at class teardown and restarted, so one crash does not fail
        # every later test.
        cls = type(self)
        if cls.proxy is not None and not cls.proxy.alive():
            cls.late_crashes.append("died (status %s) after %s%s" % (
                cls.proxy.proc.returncode, cls.last_test, cls.proxy.diag()))
            cls.proxy = cls.make_proxy(**cls.proxy_config)

    def tearDown(self):
        cls = type(self)
        cls.last_test = self.id()
        p = cls.proxy
        # A short wait catches a crash that follows the reply this test read.
        if p is not None and p.proc is not None and p.exited_within(0.05):
            status = p.proc.returncode
            cls.proxy = cls.make_proxy(**cls.proxy_config)
            self.fail("vibepit-proxy died during this test (status %s)%s" % (status, p.diag()))

    @classmethod
    def make_proxy(cls, **overrides):
        return Proxy(cls.topo, BIN_DIR, **overrides).start()

    def start_proxy(self, **overrides):
        """A proxy for one test; at the end it gets SIGTERM and must exit 0 with no sanitizer report."""
        p = self.make_proxy(**overrides)
        self.addCleanup(self._check_shutdown, p)
        return p

    def _check_shutdown(self, p):
        problem = p.shutdown_problem()
        if problem:
            self.fail(problem)

    # ---------------------------------------------------------- helpers

    def raw(self, proxy=None, timeout=LIVENESS_S):
        c = RawConn(self.topo, (proxy or self.proxy).port, timeout=timeout)
        self.addCleanup(c.close)
        return c

    def tunnel(self, target, proxy=None, timeout=LIVENESS_S):
        try:
            c, resp = connect_tunnel(self.topo, (proxy or self.proxy).port, target, timeout=timeout)
        except TimeoutError:
            # What the proxy and the fake DNS were doing: a lookup, a dial and a refusal each
            # end well inside the timeout, so this is a stall worth reading about.
            self.fail("CONNECT %s: no answer within %g s; %s\n%s%s" % (
                target, timeout, self.dns_seen(target.rsplit(":", 1)[0]),
                self.stall_report(proxy), self.diag(proxy)))
        self.addCleanup(c.close)
        return c, resp

    def dns_seen(self, host):
        """The fake DNS server's query counts for host, and the tail of its log."""
        try:
            counts = {t: self.topo.dns_count("%s/%s" % (host, t)) for t in ("A", "AAAA")}
        except (OSError, ValueError, KeyError) as e:
            counts = "unreadable (%s)" % e
        return "fake DNS queries for %s: %s\n--- fake DNS log (tail) ---\n%s" % (
            host, counts, self.topo.read_log("fake_dns")[-1500:])

    def stall_report(self, proxy=None):
        """Where a connection to the proxy waits, from the kernel's side: every socket on its
        port (one LISTEN line per worker, whose Recv-Q is that worker's accept queue: a
        queue that stays full is a worker that does not accept; SYN-RECV is a client whose
        request has not arrived yet), and what each of the proxy's threads is doing."""
        p = proxy or self.proxy
        try:
            ss = self.topo.run(self.topo.px, ["ss", "-tanoH", "sport = :%d" % p.port], timeout=5)
            sockets = ss.stdout.decode("utf-8", "replace") or ss.stderr.decode("utf-8", "replace")
        except Exception as e:  # a report must not hide the failure it describes
            sockets = "ss failed (%s)" % e
        return "--- sockets on the proxy's port ---\n%s--- proxy threads ---\n%s" % (
            sockets, p.threads())

    def curl(self, *args, proxy=None, tunnel=False, timeout=10.0):
        p = proxy or self.proxy
        return curl(self.topo, args, proxy_port=p.port if p else None, tunnel=tunnel, timeout=timeout)

    def diag(self, proxy=None):
        p = proxy or self.proxy
        return p.diag() if p else ""

    def assertNoCanaryHits(self, proxy=None):
        hits = self.topo.canary_hits()
        self.assertEqual(hits, [], "a blocked address was dialled: %s%s" % (hits, self.diag(proxy)))

    def assertStatus(self, resp, status, proxy=None):
        self.assertEqual(resp.status, status, "%r%s" % (resp, self.diag(proxy)))
