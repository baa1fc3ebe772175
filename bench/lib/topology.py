"""The benchmarks' network: namespaces "sb" (the load), "px" (the system under test) and
"net" (the fake internet), and which core each side runs on.

The load generator runs in its own namespace "sb", as the agent does in its own container.
It reaches namespace "px", which holds the proxy under test, over a veth pair (sb
192.0.2.2, px 192.0.2.1). Namespace "net" is the fake internet
(tests/integration/harness/netns.py): `vibepit-bench serve` listens on 198.51.100.10 and a
fake DNS server answers allowed.test -> 198.51.100.10. With no proxy (the ceiling), px
forwards the packets as a router would; with a proxy, px terminates both connections.
Every byte crosses both veth pairs either way.
"""

import os
import shutil
import subprocess
import sys
import time

from tests.integration.harness import netns
from tests.integration.harness.tools import need


SERVER = "198.51.100.10"
SB_ADDR, PROXY_ADDR = "192.0.2.2", "192.0.2.1"  # RFC 5737 TEST-NET-1, inside our namespaces
PORTS = {"discard": 9001, "source": 9002, "echo": 9003, "http": 8080}
# haproxy, the relay floor, listens on px for each of PORTS at RELAY_BASE + its index and
# forwards to SERVER at that port: a plain TCP relay, no CONNECT. Below the ephemeral range.
# A second instance (bench/suites/tail.py's A/A column) takes the next RELAY_STRIDE ports.
RELAY_BASE, RELAY_STRIDE = 4001, 10
SUT_CPU, LOAD_CPU = 1, 0


class BenchTopology(netns.Topology):
    """The test topology, with vibepit-bench servers instead of the Python fakes."""

    def __init__(self, bin_dir, pin=False):
        super().__init__(ipv6=False)
        # Children run in the topology's temp directory: a relative --bin-dir must not
        # resolve there.
        self.bin_dir = os.path.abspath(bin_dir)
        # pin: the system under test (whatever runs in px) on one core, the load generator and
        # the servers (sb, net) on another, so that neither can take the other's core and each
        # system is judged on one core. Needs two cores.
        self.cpus = None
        if pin:
            if (os.cpu_count() or 1) < 2:
                raise RuntimeError("pinning needs two cores; this machine has %s" % os.cpu_count())
            self.cpus = {"sut": SUT_CPU, "load": LOAD_CPU}

    def _pinned(self, ns, argv):
        if not self.cpus:
            return list(argv)
        need(argv[0])
        core = self.cpus["sut"] if ns == self.px else self.cpus["load"]
        return ["taskset", "-c", str(core)] + list(argv)

    def popen(self, ns, argv, **kw):
        return super().popen(ns, self._pinned(ns, argv), **kw)

    def run(self, ns, argv, **kw):
        return super().run(ns, self._pinned(ns, argv), **kw)

    def _create_network(self):
        super()._create_network()
        # The client namespace, as a sandbox container is: its only neighbour is px.
        self.sb = self.px[:-2] + "sb"
        self.extra_ns.append(self.sb)
        ip = lambda *a: self.run_ip(*a)
        ip("netns", "add", self.sb)
        ip("-n", self.sb, "link", "set", "lo", "up")
        ip("link", "add", "vs0", "netns", self.sb, "type", "veth", "peer", "name", "vp1", "netns", self.px)
        ip("-n", self.sb, "addr", "add", SB_ADDR + "/24", "dev", "vs0")
        ip("-n", self.px, "addr", "add", PROXY_ADDR + "/24", "dev", "vp1")
        ip("-n", self.sb, "link", "set", "vs0", "up")
        ip("-n", self.px, "link", "set", "vp1", "up")
        # The ceiling: sb reaches the fake internet through px, routed, with no proxy.
        ip("-n", self.sb, "route", "add", "198.51.100.0/24", "via", PROXY_ADDR)
        ip("-n", self.net, "route", "add", "192.0.2.0/24", "via", netns.PX_V4)
        self.run(self.px, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])

    @staticmethod
    def run_ip(*args):
        r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))

    def _start_fakes(self):
        # Peers that use the system resolver (tinyproxy) must ask our fake DNS server:
        # `ip netns exec` mounts /etc/netns/NS/resolv.conf over /etc/resolv.conf.
        self.etc_dir = os.path.join("/etc/netns", self.px)
        os.makedirs(self.etc_dir, exist_ok=True)
        with open(os.path.join(self.etc_dir, "resolv.conf"), "w") as f:
            f.write("nameserver %s\n" % netns.DNS_ADDR)
        # Short connections at tens of thousands per second would otherwise run the namespaces
        # out of ephemeral ports, held in TIME_WAIT: allow reuse and a wide port range that stays
        # clear of the peers' fixed listening ports (3128, 8888, 8080, 9001-9003).
        for ns in (self.sb, self.px, self.net):
            self.run(ns, ["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1",
                          "net.ipv4.ip_local_port_range=10000 65535"])
        py = sys.executable
        self.popen(self.net, [py, os.path.join(netns.HERE, "fake_dns.py"), "--listen",
                              netns.DNS_ADDR, "--port", "53", "--stats", self.dns_stats_path],
                   log="fake_dns")
        for kind, port in PORTS.items():
            self.popen(self.net, [self.bin("vibepit-bench"), "serve",
                                  "--listen", "%s:%d" % (SERVER, port), "--kind", kind,
                                  "--threads", "1", "--duration", "3600"],
                       log="serve-" + kind)
        deadline = time.monotonic() + 15
        while not os.path.exists(self.dns_stats_path):
            if time.monotonic() > deadline:
                raise RuntimeError("fake DNS did not start: " + self.read_log("fake_dns"))
            time.sleep(0.05)
        for port in PORTS.values():
            self.wait_port(self.sb, SERVER, port)  # also proves the routed path works

    def close(self):
        super().close()
        if getattr(self, "etc_dir", None):
            shutil.rmtree(self.etc_dir, ignore_errors=True)

    def bin(self, name):
        return os.path.join(self.bin_dir, name)

    def stop_process(self, p, sig=15, timeout=10.0):
        return super().stop_process(p, sig, timeout)


def on_sut_core(argv):
    """argv run on the system-under-test core, when there are two: a microbenchmark that
    migrates between cores (and shares one with the rest of the machine) measures noise."""
    return (["taskset", "-c", str(SUT_CPU)] if (os.cpu_count() or 1) >= 2 else []) + list(argv)
