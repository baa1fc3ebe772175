"""TLS inspection against squid's ssl-bump, side by side in one run.

Both proxies run in "px" on the core under test, each inspecting HTTPS to allowed.test:8443
(vibepit-proxy: a method/path rule names it; squid-openssl: `ssl_bump bump all`, leaf
certificates from its certificate generator, which counts as squid's). The upstream is an
HTTPS server in "net" whose certificate a test CA signed; both proxies verify it against
that CA. The load (bench/lib/https_load.py, in "sb", on the other core) trusts both
proxies' CAs and GETs one path:

  keepalive  16 connections, each a CONNECT, a TLS handshake, then requests one after another
  new        16 clients, each request on a new connection: CONNECT, a full TLS handshake
             (no resumption) on both sides of the proxy, one request

For each: requests per second, and the proxy's CPU-seconds per 1 000 requests (its process
tree, bench/lib/cpu.py); the figure of merit is requests per CPU-second, vibepit's over
squid's. The systems take turns within each round, in an order that alternates. Then the
memory an idle inspected connection holds: --idle connections each make one request and
stay open; the proxy's RSS (its process tree's) before and after, per connection.

    python3 -m bench.suites.inspect [--rounds 5] [--duration 5] [--markdown docs/benchmarks.md]

Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

from bench.lib import ROOT, cpu
from bench.lib.memory import rss_kib
from bench.lib.peers import wait_for_listen, write_squid_conf
from bench.lib.report import publish, run_facts, replay
from bench.lib.stats import median, median_interval
from bench.lib.topology import LOAD_CPU, PROXY_ADDR, SERVER, BenchTopology
from tests.integration.harness import netns
from tests.integration.harness.control import TestCa

HOST, PORT = "allowed.test", 8443
LOAD = os.path.join(ROOT, "bench", "lib", "https_load.py")
SYSTEMS = ("vibepit", "squid")
WORKLOADS = ("keepalive", "new")
GOAL = 2.0  # vibepit's requests per CPU-second over squid's, on both workloads


def start_upstream(topo):
    ca = TestCa(os.path.join(topo.tmp, "upstream-ca"))
    cert, key = ca.issue("upstream", "serverAuth", san="DNS:" + HOST)
    ready = os.path.join(topo.tmp, "https.ready")
    argv = netns.Topology._upstream_argv([SERVER], "", ready)
    topo.popen(topo.net, argv + ["--https", str(PORT), "--cert", cert, "--key", key], log="https")
    topo.wait_port(topo.net, SERVER, PORT)
    return ca.cert


def start_vibepit(topo, upstream_ca):
    ca_out = os.path.join(topo.tmp, "vibepit-ca.pem")
    cfg = {"proxy-listen": [PROXY_ADDR + ":0"], "upstream-dns": [netns.DNS_ADDR],
           "allow-http": ["%s:%d GET /**" % (HOST, PORT)],
           "decision-log": os.path.join(topo.tmp, "decisions.ndjson"), "threads": 1,
           "max-connections": 100000, "inspect-ca-cert-out": ca_out, "upstream-ca-file": upstream_ca}
    path = os.path.join(topo.tmp, "vibepit.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    p = topo.popen(topo.px, [topo.bin("vibepit-proxy"), "--config", path], log="vibepit")
    m = wait_for_listen(topo, p, "vibepit", r"listening proxy 192\.0\.2\.1:(\d+)")
    return p, "%s:%s" % (PROXY_ADDR, m.group(1)), ca_out


def start_squid(topo, upstream_ca):
    d = os.path.join(topo.tmp, "squid")
    os.makedirs(d, exist_ok=True)
    # squid's CA, of the key type vibepit's has: ECDSA P-256.
    key, cert = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=squid bench CA",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign"], check=True, capture_output=True)
    db = os.path.join(d, "ssl_db")
    subprocess.run(["/usr/lib/squid/security_file_certgen", "-c", "-s", db, "-M", "16MB"],
                   check=True, capture_output=True)
    conf = write_squid_conf(d, """http_port {listen}:3128 ssl-bump tls-cert={cert} tls-key={key} \\
    generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program /usr/lib/squid/security_file_certgen -s {db} -M 16MB
sslcrtd_children 4 startup=1 idle=1
tls_outgoing_options cafile={upstream_ca}
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
""".format(listen=PROXY_ADDR, cert=cert, key=key, db=db, upstream_ca=upstream_ca))
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            shutil.chown(os.path.join(root, name), "proxy")
    shutil.chown(d, "proxy")
    os.chmod(topo.tmp, 0o755)  # squid runs as "proxy" and must reach its directory
    os.chmod(upstream_ca, 0o644)
    p = topo.popen(topo.px, ["squid", "-N", "-f", conf], log="squid")
    topo.wait_port(topo.px, PROXY_ADDR, 3128, timeout=20)
    return p, PROXY_ADDR + ":3128", cert


def run_load(topo, proxy, cafile, mode, duration, pid):
    meter = cpu.Meter(pid).start()
    r = topo.run(topo.sb, [sys.executable, LOAD, "--proxy", proxy, "--host", HOST, "--port", str(PORT),
                           "--path", "/bench", "--cafile", cafile, "--mode", mode,
                           "--duration", str(duration)], timeout=duration + 60)
    cost = meter.stop()
    out = json.loads(r.stdout.decode())
    if out["errors"] or not out["requests"]:
        raise RuntimeError("%s %s: %d errors (first: %s), %d requests" % (
            proxy, mode, out["errors"], out["first_error"], out["requests"]))
    return {"rps": out["requests"] / out["seconds"],
            "cpu_per_1000": cost["process_s"] / out["requests"] * 1000,
            "per_cpu_s": out["requests"] / cost["process_s"] if cost["process_s"] else None}


def trust_file(topo, ca_paths):
    """One PEM file with every proxy's CA, for the load to trust."""
    cafile = os.path.join(topo.tmp, "clients-trust.pem")
    with open(cafile, "w") as out:
        for path in ca_paths:
            with open(path) as f:
                out.write(f.read())
    return cafile


def measure(topo, sut, systems, cafile, rounds, duration, label):
    """Each workload on each system (sut: name -> (proxy address, pid)), warmed first, then
    `rounds` times in an order that alternates. The rounds, as run_load's results."""
    for s in systems:   # warm: leaves issued, helpers started, caches filled
        for w in WORKLOADS:
            run_load(topo, sut[s][0], cafile, w, 1, sut[s][1])
    out = []
    for i in range(rounds):
        order = systems if i % 2 == 0 else tuple(reversed(systems))
        one = {}
        for w in WORKLOADS:
            one[w] = {s: run_load(topo, sut[s][0], cafile, w, duration, sut[s][1]) for s in order}
        print("bench %s: round %d: %s" % (label, i + 1, json.dumps(one)), flush=True)
        out.append(one)
    return out


def tree_rss_kib(pid):
    return sum(rss_kib(p) for p in cpu.tree_pids(pid))


def idle_kib(topo, proxy, cafile, pid, count):
    """RSS per idle inspected connection, with `count` of them open."""
    before = tree_rss_kib(pid)
    p = topo.popen(topo.sb, [sys.executable, LOAD, "--proxy", proxy, "--host", HOST, "--port", str(PORT),
                             "--path", "/bench", "--cafile", cafile, "--mode", "hold",
                             "--connections", str(count), "--duration", "60"],
                   log="hold", stdout=subprocess.PIPE)
    try:
        line = p.stdout.readline().decode()
        if '"open"' not in line:
            raise RuntimeError("hold: %s %s" % (line, topo.read_log("hold")))
        time.sleep(1)
        return (tree_rss_kib(pid) - before) / count
    finally:
        topo.stop_process(p)


def render(res):
    lines = ["Run: %s, %s; each proxy (one worker) pinned to core 1, the load and the upstream "
             "to core 0; %d rounds of %d s per workload and proxy, order alternating; medians, "
             "with the rounds' range." % (res["when"], res["machine"], res["rounds_n"], res["duration"]),
             "",
             "| workload | proxy | requests/s | CPU-s per 1 000 requests | requests per CPU-s "
             "(rounds' range) | vibepit ÷ squid, requests per CPU-s: median (interval): goal ≥ 2× |",
             "|---|---|---|---|---|---|"]
    for w in WORKLOADS:
        for s in SYSTEMS:
            runs = [r[w][s] for r in res["rounds"]]
            per = [x["per_cpu_s"] for x in runs]
            ratio = ""
            if s == "vibepit":
                ratios = [r[w]["vibepit"]["per_cpu_s"] / r[w]["squid"]["per_cpu_s"] for r in res["rounds"]]
                ratio = "**%.2f×**" % median(ratios)
                interval = median_interval(ratios)
                if interval:   # the verdict's rule (docs/benchmarks.md, Targets)
                    low, high, _ = interval
                    word = "met" if low >= GOAL else "not met" if high < GOAL else "not resolved"
                    ratio += " (%.2f–%.2f): %s" % (low, high, word)
            lines.append("| %s | %s | %.0f | %.3f | %.0f (%.0f–%.0f) | %s |" % (
                w, s, median(x["rps"] for x in runs), median(x["cpu_per_1000"] for x in runs),
                median(per), min(per), max(per), ratio))
    idle = res.get("idle_kib")
    if idle:
        lines += ["", "| %d idle inspected connections (one request each, then open) | proxy RSS per "
                  "connection |" % res["idle_n"], "|---|---|"]
        lines += ["| %s | %.0f KiB |" % (s, idle[s]) for s in SYSTEMS]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=5, help="seconds per measurement")
    ap.add_argument("--idle", type=int, default=500, help="idle connections for the memory figure (0: skip)")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "bench-inspect.json"))
    ap.add_argument("--markdown", help="write the table into this file's block \"inspect\"")
    ap.add_argument("--render", metavar="JSON", help="only write the tables again, from a kept run")
    args = ap.parse_args()
    if replay(args, render, "inspect", "python3 -m bench.suites.inspect"):
        return
    if os.geteuid() != 0:
        sys.exit("bench inspect: needs root (network namespaces)")
    if not os.path.exists("/usr/lib/squid/security_file_certgen"):
        sys.exit("bench inspect: squid with OpenSSL is missing (scripts/install-deps.sh --bench)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {LOAD_CPU})
    netns.install_signal_cleanup()
    res = {**run_facts(), "rounds_n": args.rounds, "duration": args.duration, "rounds": []}
    with BenchTopology(args.bin_dir, pin=True) as topo:
        upstream_ca = start_upstream(topo)
        vp, vp_addr, vp_ca = start_vibepit(topo, upstream_ca)
        sq, sq_addr, sq_ca = start_squid(topo, upstream_ca)
        cafile = trust_file(topo, (vp_ca, sq_ca))
        sut = {"vibepit": (vp_addr, vp.pid), "squid": (sq_addr, sq.pid)}
        res["rounds"] = measure(topo, sut, SYSTEMS, cafile, args.rounds, args.duration, "inspect")
        if args.idle:
            res["idle_n"] = args.idle
            res["idle_kib"] = {s: idle_kib(topo, sut[s][0], cafile, sut[s][1], args.idle) for s in SYSTEMS}
    publish(res, render(res), args.json, args.markdown, "inspect", "python3 -m bench.suites.inspect")


if __name__ == "__main__":
    main()
