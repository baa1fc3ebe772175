"""The DNS servers under test in "px" (vibepit-proxy, dnsmasq, unbound, dnsdist), each
forwarding to the same authoritative upstream, `vibepit-bench dns-auth` on 198.51.100.53 in
"net", which answers names under cached.test (TTL 3600) and miss.test (TTL 0) with one A
record; and dnsperf in "sb", at saturation or at a fixed offered load."""

import json
import os
import re
import time

from bench.lib import cpu
from bench.lib.stats import pooled
from bench.lib.topology import PROXY_ADDR, BenchTopology


AUTH_ADDR = "198.51.100.53"
LISTEN = PROXY_ADDR
ZONES = ["cached.test", "miss.test"]
STREAMS = ["denied", "cached", "miss"]
# Each server listens on its own port of LISTEN, so that all of them run through the whole
# measurement and the rounds can interleave them.
# "dnsdist-again" is a second dnsdist with the same configuration, an A/A pair with the first:
# what separates the two is the machine, the yardstick for the latency targets.
SERVER_PORTS = {"vibepit": 53, "dnsmasq": 5302, "unbound": 5303, "dnsdist": 5304, "dnsdist-again": 5305}


class DnsTopology(BenchTopology):
    def _start_fakes(self):
        super()._start_fakes()
        self.run(self.net, ["ip", "addr", "add", AUTH_ADDR + "/32", "dev", "lo"])
        self.popen(self.net, [self.bin("vibepit-bench"), "dns-auth", "--listen", AUTH_ADDR + ":53",
                              "--zone", "cached.test:3600", "--zone", "miss.test:0",
                              "--threads", "1", "--duration", "7200"], log="dns-auth")
        time.sleep(0.3)


# ------------------------------------------------------------------ the servers

def wait_udp(topo, proc, log, port=53, timeout=20):
    """Wait until the server answers a query for a cached name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited: %s" % (log, topo.read_log(log)[-2000:]))
        r = topo.run(topo.sb, ["dig", "@" + LISTEN, "-p", str(port), "+tries=1", "+time=1", "+short",
                               "c0.cached.test"], timeout=10)
        if r.returncode == 0 and b"198.51.100" in r.stdout:
            return
        time.sleep(0.2)
    raise RuntimeError("%s does not answer: %s" % (log, topo.read_log(log)[-2000:]))


def start_vibepit(topo, threads, extra=(), port=53):
    cfg = {
        "proxy-listen": [LISTEN + ":3130"],
        "dns-listen": ["%s:%d" % (LISTEN, port)],
        "upstream-dns": [AUTH_ADDR],
        "allow-dns": ZONES + ["*." + z for z in ZONES],
        "decision-log": os.path.join(topo.tmp, "dns-decisions.ndjson"),
        "threads": threads,
        "dns-client-qps": 0,
        "dns-max-pending": 100000,
    }
    for item in extra:                   # --set KEY=JSON
        key, _, value = item.partition("=")
        cfg[key] = json.loads(value)
    path = os.path.join(topo.tmp, "vibepit-dns.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return topo.popen(topo.px, [topo.bin("vibepit-proxy"), "--config", path], log="vibepit-dns")


def start_dnsmasq(topo, port=53):
    argv = ["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-poll",
            "--listen-address=" + LISTEN, "--bind-interfaces", "--port=%d" % port, "--user=root",
            "--cache-size=10000", "--dns-forward-max=1000",
            "--pid-file=" + os.path.join(topo.tmp, "dnsmasq.pid")]
    argv += ["--server=/%s/%s" % (z, AUTH_ADDR) for z in ZONES]
    return topo.popen(topo.px, argv, log="dnsmasq")


def start_unbound(topo, threads, port=53):
    d = os.path.join(topo.tmp, "unbound")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "unbound.conf")
    zones = "".join('  local-zone: "%s." transparent\n' % z for z in ZONES)
    fwd = "".join('forward-zone:\n  name: "%s."\n  forward-addr: %s\n' % (z, AUTH_ADDR) for z in ZONES)
    with open(conf, "w") as f:
        f.write("""server:
  interface: {listen}
  port: {port}
  num-threads: {threads}
  so-reuseport: yes
  access-control: 192.0.2.0/24 allow
  do-not-query-localhost: no
  do-ip6: no
  username: ""
  chroot: ""
  directory: "{d}"
  pidfile: "{d}/unbound.pid"
  use-syslog: no
  verbosity: 0
  module-config: "iterator"
  msg-cache-size: 32m
  rrset-cache-size: 64m
  local-zone: "." refuse
{zones}{fwd}""".format(listen=LISTEN, port=port, d=d, zones=zones, fwd=fwd, threads=threads))
    return topo.popen(topo.px, ["unbound", "-d", "-c", conf], log="unbound")


def start_dnsdist(topo, port=53, name="dnsdist"):
    conf = os.path.join(topo.tmp, name + ".conf")
    with open(conf, "w") as f:
        f.write("""setSecurityPollSuffix("")
setACL({{"192.0.2.0/24"}})
setLocal("{listen}:{port}", {{reusePort=true}})
addLocal("{listen}:{port}", {{reusePort=true}})
newServer({{address="{auth}:53"}})
pc = newPacketCache(10000, {{maxTTL=86400, minTTL=0}})
getPool(""):setCache(pc)
smn = newSuffixMatchNode()
{adds}
addAction(NotRule(SuffixMatchNodeRule(smn, true)), RCodeAction(DNSRCode.REFUSED))
""".format(listen=LISTEN, port=port, auth=AUTH_ADDR, adds="\n".join('smn:add("%s")' % z for z in ZONES)))
    return topo.popen(topo.px, ["dnsdist", "--supervised", "--disable-syslog", "-C", conf],
                      log=name)


# ------------------------------------------------------------------ measurements

def write_streams(d, miss_count):
    paths = {}
    paths["denied"] = os.path.join(d, "denied.txt")
    with open(paths["denied"], "w") as f:
        f.writelines("d%d.denied.test A\n" % i for i in range(100000))
    paths["cached"] = os.path.join(d, "cached.txt")
    with open(paths["cached"], "w") as f:
        f.writelines("c%d.cached.test A\n" % (i % 100) for i in range(100000))
    paths["miss"] = os.path.join(d, "miss.txt")
    with open(paths["miss"], "w") as f:
        f.writelines("m%d.miss.test A\n" % i for i in range(miss_count))
    return paths


QPS_RE = re.compile(r"Queries per second:\s+([\d.]+)")
COMPLETED_RE = re.compile(r"Queries completed:\s+(\d+)")
LOST_RE = re.compile(r"Queries lost:\s+(\d+)")
RCODES_RE = re.compile(r"Response codes:\s+(.*)")


def pass_args(path):
    """dnsperf arguments for a stream: the miss names are each asked once (-n 1), since a
    second pass would ask them again; the others loop for the whole run."""
    return ["-n", "1"] if path.endswith("miss.txt") else []


def dnsperf(topo, stream_file, duration, extra, timeout, port=53):
    argv = ["dnsperf", "-s", LISTEN, "-p", str(port), "-d", stream_file, "-l", str(duration),
            "-c", "8", "-T", "1", "-q", "256", "-t", "2"] + extra
    r = topo.run(topo.sb, argv, timeout=timeout)
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


def measure_qps(topo, pid, path, duration, port=53):
    meter = cpu.Meter(pid).start()
    out = dnsperf(topo, path, duration, pass_args(path), duration + 60, port)
    used = meter.stop()
    m = QPS_RE.search(out)
    done = COMPLETED_RE.search(out)
    if not m or not done:
        raise RuntimeError("dnsperf: " + out[-1500:])
    lost = LOST_RE.search(out)
    codes = RCODES_RE.search(out)
    per_1k = int(done.group(1)) / 1e3
    sut = topo.cpus["sut"] if topo.cpus else None
    return {"qps": float(m.group(1)), "lost": int(lost.group(1)) if lost else None,
            "rcodes": codes.group(1).strip() if codes else "",
            "cpu_per_1k": used["process_s"] / per_1k if per_1k else None,
            "softirq_per_1k": used["softirq_s"].get(sut, 0.0) / per_1k if per_1k and sut is not None else None}


def measure_latency(topo, pid, path, qps, duration, port=53):
    """Median and p99 latency (µs) at a fixed offered load, from dnsperf's per-query lines,
    and the cores the server kept busy meanwhile; and every query's latency (µs), for
    pooling over the rounds."""
    meter = cpu.Meter(pid).start()
    out = dnsperf(topo, path, duration, ["-Q", str(qps), "-v"] + pass_args(path), duration + 60, port)
    used = meter.stop()
    lat = [float(x) * 1e6 for x in re.findall(r"^> \w+ \S+ \S+ ([\d.]+)$", out, re.M)]
    if not lat:
        raise RuntimeError("dnsperf -v gave no latencies: " + out[-1500:])
    one = pooled(lat)
    return {"p50_us": one["p50_us"], "p99_us": one["p99_us"], "samples": len(lat),
            "fixed_cores": used["process_s"] / used["wall_s"]}, lat
