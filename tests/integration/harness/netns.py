"""The test "internet": two network namespaces joined by a veth pair.

    px  (proxy + clients)                 net (fake internet)
    lo 127.0.0.1, ::1                     lo 198.51.100.10-.20, 2001:db8::10,
    vp0 203.0.113.1/24                       10.0.0.1, 169.254.169.254 (canaries)
        2001:db8:ffff::1/64  <-- veth --> vn0 203.0.113.2/24, 2001:db8:ffff::2/64
    routes: 198.51.100.0/24, 10.0.0.1,    blackhole 198.51.100.250
            169.254.169.254 via .2;
            2001:db8::/32 via ::2

net runs fake_dns (203.0.113.2:53), fake_upstream on the 198.51.100.x
addresses except .19 (nothing listens: connection refused) and a canary
fake_upstream on 10.0.0.1 and 169.254.169.254. px runs a canary on
127.0.0.1 and ::1 (ports 80, 443, 8080). Canaries log every connection: a
proxy that dials a blocked address leaves a trace there.

Names carry the creating pid (vpt<pid>n<k>px / ...net) so parallel test
processes never collide, and namespaces of dead test processes are swept.
Children get PR_SET_PDEATHSIG so they die with the test process.
"""

import atexit
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

from .tools import need
from .wait import LIVENESS_S, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
PX_V4, NET_V4 = "203.0.113.1", "203.0.113.2"
PX_V6, NET_V6 = "2001:db8:ffff::1", "2001:db8:ffff::2"
DNS_ADDR = NET_V4
UPSTREAM_V4 = ["198.51.100.%d" % i for i in range(10, 21) if i != 19]
DEAD_V4 = "198.51.100.19"
BLACKHOLE_V4 = "198.51.100.250"
UPSTREAM_V6 = "2001:db8::10"
NET_CANARIES = ["10.0.0.1", "169.254.169.254"]
PX_CANARIES = ["127.0.0.1", "::1"]
HTTP_PORTS, ECHO_PORT, BULK_PORT = [80, 8080, 8443], 443, 9000

_NAME_RE = re.compile(r"^vpt(\d+)n\d+(px|net|sb)$")
_TMP_RE = re.compile(r"^vpt(\d+)n\d+-\w+$")
_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_counter = [0]
_live = []          # topologies to close at exit


def clean_env():
    """Environment for children: no proxy variables, no curlrc surprises."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("CURL_HOME", None)
    return env


def _die_with_parent():
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a crash must not drop core files in the tree


def _ip(*args, check=True):
    need("ip")
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))
    return r


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def sweep_stale():
    """Delete namespaces and temp dirs left by harness processes that no longer exist."""
    r = _ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("netns", "del", name, check=False)
    tmp = tempfile.gettempdir()
    for entry in os.listdir(tmp):
        m = _TMP_RE.match(entry)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)


def in_netns(ns, fn, *args):
    """Run fn(*args) on a fresh thread that has joined namespace ns.

    Sockets keep the namespace they were created in, so a socket made here
    can be used from any thread afterwards.
    """
    box = {}

    def run():
        try:
            fd = os.open("/run/netns/%s" % ns, os.O_RDONLY)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err))
            finally:
                os.close(fd)
            box["value"] = fn(*args)
        except BaseException as e:   # re-raised in the caller
            box["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class Topology:
    def __init__(self, ipv6=True):
        _counter[0] += 1
        base = "vpt%dn%d" % (os.getpid(), _counter[0])
        self.px, self.net = base + "px", base + "net"
        self.extra_ns = []  # namespaces a subclass adds; deleted with the others
        self.ipv6_wanted = ipv6
        self.ipv6 = False
        self.tmp = tempfile.mkdtemp(prefix=base + "-")
        self.procs = []
        self.dns_stats_path = os.path.join(self.tmp, "dns-stats.json")
        self.upstream_log = os.path.join(self.tmp, "upstream-conns.ndjson")
        self.canary_log = os.path.join(self.tmp, "canary-conns.ndjson")
        self._closed = False

    # ---------------------------------------------------------- lifecycle

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        sweep_stale()
        _live.append(self)
        try:
            self._create_network()
            self._start_fakes()
        except BaseException:
            self.close()
            raise
        return self

    def _create_network(self):
        px, net = self.px, self.net
        _ip("netns", "add", px)
        _ip("netns", "add", net)
        _ip("-n", px, "link", "set", "lo", "up")
        _ip("-n", net, "link", "set", "lo", "up")
        _ip("link", "add", "vp0", "netns", px, "type", "veth", "peer", "name", "vn0", "netns", net)
        _ip("-n", px, "addr", "add", PX_V4 + "/24", "dev", "vp0")
        _ip("-n", net, "addr", "add", NET_V4 + "/24", "dev", "vn0")
        for a in UPSTREAM_V4 + [DEAD_V4] + NET_CANARIES:
            _ip("-n", net, "addr", "add", a + "/32", "dev", "lo")
        if self.ipv6_wanted:
            try:
                _ip("-n", px, "addr", "add", PX_V6 + "/64", "dev", "vp0", "nodad")
                _ip("-n", net, "addr", "add", NET_V6 + "/64", "dev", "vn0", "nodad")
                _ip("-n", net, "addr", "add", UPSTREAM_V6 + "/128", "dev", "lo")
                self.ipv6 = True
            except RuntimeError as e:
                sys.stderr.write("harness: IPv6 disabled: %s\n" % e)
        _ip("-n", px, "link", "set", "vp0", "up")
        _ip("-n", net, "link", "set", "vn0", "up")
        _ip("-n", px, "route", "add", "198.51.100.0/24", "via", NET_V4)
        for a in NET_CANARIES:
            _ip("-n", px, "route", "add", a + "/32", "via", NET_V4)
        _ip("-n", net, "route", "add", "blackhole", BLACKHOLE_V4 + "/32")
        if self.ipv6:
            try:
                _ip("-n", px, "-6", "route", "add", "2001:db8::/32", "via", NET_V6)
            except RuntimeError as e:
                sys.stderr.write("harness: IPv6 disabled: %s\n" % e)
                self.ipv6 = False

    def _start_fakes(self):
        py = sys.executable
        ready = []
        self.popen(self.net, [py, os.path.join(HERE, "fake_dns.py"), "--listen", DNS_ADDR,
                              "--port", "53", "--stats", self.dns_stats_path],
                   log="fake_dns")
        ready.append(self.dns_stats_path)
        addrs = UPSTREAM_V4 + ([UPSTREAM_V6] if self.ipv6 else [])
        r = os.path.join(self.tmp, "upstream.ready")
        self.popen(self.net, self._upstream_argv(addrs, self.upstream_log, r,
                                                 http=HTTP_PORTS, echo=[ECHO_PORT], bulk=[BULK_PORT]),
                   log="fake_upstream")
        ready.append(r)
        r = os.path.join(self.tmp, "canary-net.ready")
        self.popen(self.net, self._upstream_argv(NET_CANARIES, self.canary_log, r,
                                                 http=[80, 8080], echo=[443]), log="canary_net")
        ready.append(r)
        r = os.path.join(self.tmp, "canary-px.ready")
        self.popen(self.px, self._upstream_argv(PX_CANARIES, self.canary_log, r,
                                                http=[80, 8080], echo=[443]), log="canary_px")
        ready.append(r)

        def all_ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("fake exited early (%s): %s" % (p.args, self.read_log(p.log_name)))
            return all(os.path.exists(p) for p in ready)
        if not wait_until(all_ready, timeout=LIVENESS_S + 5, interval=0.02):
            raise RuntimeError("fakes not ready: %s" % [p for p in ready if not os.path.exists(p)])

    @staticmethod
    def _upstream_argv(addrs, log, ready, http=(), echo=(), bulk=()):
        argv = [sys.executable, os.path.join(HERE, "fake_upstream.py"), "--log", log, "--ready", ready]
        for a in addrs:
            argv += ["--addr", a]
        join = lambda ps: ",".join(str(p) for p in ps)
        return argv + ["--http", join(http), "--echo", join(echo), "--bulk", join(bulk)]

    def close(self):
        if self._closed:
            return
        self._closed = True
        for p in list(self.procs):
            self.stop_process(p)
        for ns in [self.px, self.net] + self.extra_ns:
            _ip("netns", "del", ns, check=False)
        if os.environ.get("VIBEPIT_IT_KEEP_TMP"):
            sys.stderr.write("harness: kept %s\n" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
        if self in _live:
            _live.remove(self)

    # ---------------------------------------------------------- processes

    def popen(self, ns, argv, log=None, stdout=None, stderr=None, **kw):
        """Start argv inside ns. `ip netns exec` execs, so the pid is argv's."""
        if log:
            path = os.path.join(self.tmp, log + ".log")
            f = open(path, "ab")
            stdout = f if stdout is None else stdout
            stderr = f if stderr is None else stderr
        kw.setdefault("cwd", self.tmp)
        need(argv[0])
        p = subprocess.Popen(["ip", "netns", "exec", ns] + list(argv), stdout=stdout, stderr=stderr,
                             stdin=subprocess.DEVNULL, env=kw.pop("env", clean_env()),
                             preexec_fn=_die_with_parent, **kw)
        p.log_name = log
        if log:
            f.close()
        self.procs.append(p)
        return p

    def stop_process(self, p, sig=signal.SIGTERM, timeout=3.0):
        """Signal one of our own children by pid; SIGKILL if it lingers."""
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            except ProcessLookupError:
                pass
        if p in self.procs:
            self.procs.remove(p)
        return p.returncode

    def run(self, ns, argv, timeout=20, input=None):
        """Run argv inside ns to completion; returns CompletedProcess (bytes)."""
        need(argv[0])
        return subprocess.run(["ip", "netns", "exec", ns] + list(argv), capture_output=True,
                              timeout=timeout, env=clean_env(), input=input, cwd=self.tmp,
                              preexec_fn=_die_with_parent)

    def read_log(self, name):
        try:
            with open(os.path.join(self.tmp, (name or "") + ".log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    # ---------------------------------------------------------- sockets

    def socket(self, ns, family=socket.AF_INET, type=socket.SOCK_STREAM):
        return in_netns(ns, socket.socket, family, type)

    def connect(self, ns, host, port, timeout=5.0):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = self.socket(ns, family)
        s.settimeout(timeout)
        try:
            s.connect((host, port))
        except BaseException:
            s.close()
            raise
        return s

    def wait_port(self, ns, host, port, timeout=LIVENESS_S):
        def accepts():
            try:
                self.connect(ns, host, port, timeout=1.0).close()
                return True
            except OSError:
                return False
        if not wait_until(accepts, timeout=timeout):
            self.connect(ns, host, port, timeout=1.0).close()   # raises the error seen

    # ---------------------------------------------------------- observations

    def dns_stats(self):
        with open(self.dns_stats_path) as f:
            return json.load(f)

    def dns_count(self, key=None):
        """Total queries, or queries for one "name/TYPE" key."""
        s = self.dns_stats()
        return s["total"] if key is None else s["queries"].get(key, 0)

    @staticmethod
    def _read_ndjson(path):
        try:
            with open(path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except OSError:
            return []

    def upstream_connections(self):
        return self._read_ndjson(self.upstream_log)

    def canary_hits(self):
        return self._read_ndjson(self.canary_log)


@atexit.register
def _close_all():
    for t in list(_live):
        try:
            t.close()
        except Exception as e:  # keep closing the others
            sys.stderr.write("harness: cleanup failed: %s\n" % e)


def _on_term(signum, frame):
    _close_all()
    sys.exit(128 + signum)


def install_signal_cleanup():
    """Close namespaces on SIGTERM/SIGINT too. After a SIGKILL, children die by PDEATHSIG and
    the next run's sweep_stale() removes the namespaces and temp dirs."""
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)
