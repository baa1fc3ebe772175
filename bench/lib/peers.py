"""The systems under test in "px": vibepit-proxy, haproxy (the relay floor), squid and
tinyproxy, each with the same allowlist, and a Column that says how the load reaches the
servers through one of them."""

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

from bench.lib.topology import PORTS, PROXY_ADDR, RELAY_BASE, RELAY_STRIDE, SB_ADDR, SERVER
from tests.integration.harness import netns


def wait_for_listen(topo, proc, log, pattern, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, topo.read_log(log))
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (log, topo.read_log(log)))
        time.sleep(0.05)
    raise RuntimeError("%s did not start: %s" % (log, topo.read_log(log)))


def start_vibepit(topo, threads, binary=None, name="vibepit", timeout=15):
    """vibepit-proxy from the topology's bin dir, or `binary` (another build, under its own
    `name`, beside the first)."""
    cfg = {
        "proxy-listen": [PROXY_ADDR + ":0"],
        "upstream-dns": [netns.DNS_ADDR],
        "allow-http": ["allowed.test:*"],
        "decision-log": os.path.join(topo.tmp, "decisions-%s.ndjson" % name),
        "threads": threads,
        "max-connections": 100000,
    }
    path = os.path.join(topo.tmp, "%s.json" % name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [binary or topo.bin("vibepit-proxy"), "--config", path], log=name)
    m = wait_for_listen(topo, p, name, r"listening proxy 192\.0\.2\.1:(\d+)", timeout)
    return p, "%s:%s" % (PROXY_ADDR, m.group(1))


def move_log_writer(topo, pid, who):
    """Moves vibepit-proxy `pid`'s decision-log writer (its one thread named "vp-log") to the
    load's core, so that the core under test belongs to the I/O thread alone: what sharing
    that core with the writer costs is then a column's difference. Exits if there is not
    exactly one such thread."""
    tids = []
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() == "vp-log":
                    tids.append(tid)
        except FileNotFoundError:
            pass  # a thread that has just ended
    if len(tids) != 1:
        sys.exit("%s: expected one vp-log thread in vibepit-proxy %d, found %d" % (who, pid, len(tids)))
    subprocess.run(["taskset", "-p", "-c", str(topo.cpus["load"]), tids[0]], check=True,
                   stdout=subprocess.DEVNULL)


def write_squid_conf(d, head):
    """squid.conf in `d`: `head` (its http_port and what goes with it), then what every
    squid here shares: one worker's files in `d`, no cache, the fake DNS, allowed.test only."""
    conf = os.path.join(d, "squid.conf")
    with open(conf, "w") as f:
        f.write(head + """pid_filename {d}/squid.pid
cache_effective_user proxy
cache deny all
cache_mem 8 MB
access_log stdio:{d}/access.log
cache_log {d}/cache.log
cache_store_log none
coredump_dir {d}
hosts_file none
dns_nameservers {dns}
max_filedescriptors 65536
shutdown_lifetime 1 seconds
acl allowed dstdomain allowed.test
acl CONNECT method CONNECT
http_access allow allowed
http_access deny all
""".format(d=d, dns=netns.DNS_ADDR))
    return conf


def start_squid(topo):
    d = os.path.join(topo.tmp, "squid")
    os.makedirs(d, exist_ok=True)
    conf = write_squid_conf(d, "http_port %s:3128\n" % PROXY_ADDR)
    shutil.chown(d, "proxy")
    os.chmod(topo.tmp, 0o755)  # squid runs as "proxy" and must reach its directory
    p = topo.popen(topo.px, ["squid", "-N", "-f", conf], log="squid")
    topo.wait_port(topo.px, PROXY_ADDR, 3128, timeout=20)
    return p, via_proxy(PROXY_ADDR + ":3128", p.pid)


def start_tinyproxy(topo):
    d = os.path.join(topo.tmp, "tinyproxy")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "filter"), "w") as f:
        f.write("^allowed\\.test$\n")
    conf = os.path.join(d, "tinyproxy.conf")
    with open(conf, "w") as f:
        f.write("""Port 8888
Listen {listen}
Timeout 600
MaxClients 1000
Allow {client}
Filter "{d}/filter"
FilterDefaultDeny Yes
FilterURLs Off
FilterExtended On
LogLevel Warning
LogFile "{d}/tinyproxy.log"
PidFile "{d}/tinyproxy.pid"
""".format(d=d, listen=PROXY_ADDR, client=SB_ADDR))
    os.chmod(d, 0o777)
    os.chmod(topo.tmp, 0o755)
    p = topo.popen(topo.px, ["tinyproxy", "-d", "-c", conf], log="tinyproxy")
    topo.wait_port(topo.px, PROXY_ADDR, 8888, timeout=20)
    return p, via_proxy(PROXY_ADDR + ":8888", p.pid)


def start_haproxy(topo, instance=0, timeout=20):
    """haproxy as the relay floor: one thread, plain TCP, one frontend per server port,
    splicing both ways (forced: see below). It parses nothing and decides nothing, so no proxy can do less work
    per byte or per connection. Instances 1, 2, ... are further copies on ports of their own."""
    name = "haproxy" if instance == 0 else "haproxy-%d" % instance
    d = os.path.join(topo.tmp, name)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "haproxy.cfg")
    # haproxy refuses to start unless the open-file limit covers what maxconn can need (two
    # descriptors per connection, and pipes for splicing): stay well inside it.
    maxconn = (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 1000) // 3
    # splice-auto did not splice here (strace: one recv and one send per 16 KiB, 61 606 of
    # each per GB): splicing is forced both ways, through pipes as large as vibepit-proxy's.
    lines = ["global", "  nbthread 1", "  maxconn %d" % maxconn, "  pidfile %s/haproxy.pid" % d,
             "  tune.pipesize 262144",
             "defaults", "  mode tcp", "  option splice-request", "  option splice-response",
             "  timeout connect 5s",
             "  timeout client 600s", "  timeout server 600s", "  maxconn %d" % maxconn]
    relay = {}
    for i, (kind, port) in enumerate(sorted(PORTS.items())):
        relay[kind] = RELAY_BASE + instance * RELAY_STRIDE + i
        lines += ["listen relay_%s" % kind, "  bind %s:%d" % (PROXY_ADDR, relay[kind]),
                  "  server upstream %s:%d" % (SERVER, port)]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = topo.popen(topo.px, ["haproxy", "-db", "-f", conf], log=name)
    deadline = time.monotonic() + timeout
    for port in relay.values():
        while True:
            if p.poll() is not None:
                raise RuntimeError("haproxy exited: " + topo.read_log(name))
            try:
                topo.connect(topo.px, PROXY_ADDR, port, timeout=1.0).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not listen: " + topo.read_log(name))
                time.sleep(0.05)
    return p, Column("none", lambda kind: "%s:%d" % (PROXY_ADDR, relay[kind]), p.pid)


class Column:
    """One system under test: how the load generator reaches each of SERVER's ports through
    it, and the process whose CPU time is its cost (None for the no-proxy ceiling)."""

    def __init__(self, proxy, target, pid):
        self.proxy = proxy            # --proxy argument of vibepit-bench ("none": direct)
        self.target = target          # kind -> "host:port" as the load generator names it
        self.pid = pid


def via_proxy(addr, pid):
    return Column(addr, lambda kind: "allowed.test:%d" % PORTS[kind], pid)


def no_proxy():
    return Column("none", lambda kind: "%s:%d" % (SERVER, PORTS[kind]), None)
