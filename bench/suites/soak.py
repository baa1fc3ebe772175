"""Soak: mixed load with fault events against one vibepit-proxy for --duration seconds,
then checks that it came out as it went in.

Topology: as bench/suites/dns.py (namespaces sb -> px -> net). The proxy serves HTTP and
DNS on 192.0.2.1 in "px"; the load runs in "sb"; names resolve through the authoritative
`vibepit-bench dns-auth` (every A record 198.51.100.10, where the `vibepit-bench serve`
upstreams listen).

Load, all at once until the end, each at a fixed offered rate (--scale multiplies them):
  churn    CONNECT set-up and tear-down (connect-rate --rate, one byte echoed)
  bulk     one CONNECT tunnel moving bytes, 2 s in every 10, alternately up and down
  http     keep-alive absolute-form GETs (http-rps --rate)
  dns      dnsperf at a fixed rate on three streams: allowed names answered from the cache,
           denied names, and unique allowed names that miss the cache (upstream each time)
  denied   CONNECTs for names not allowlisted, a private literal and an allowed name on a
           port no rule opens: each must get 403
  rules    one `POST /v1/allow-http` every second
Fault events, one every --fault-every seconds, in turn:
  rotate   the decision log renamed, then SIGHUP: the proxy writes a new file
  resets   20 clients reset (RST) their tunnels in the middle of a download
  slow     50 clients send half a request head and stall: closed at header-timeout-ms
  dnsjunk  300 malformed datagrams, 20 DNS-over-TCP clients declaring 64 KiB and sending 1 byte
  flood    300 denied CONNECTs at once (folded in the decision log past its per-client budget)

Checks (the exit status is 1 when one fails):
  - RSS and open descriptors at rest after the run within 5% of the warm baseline (at rest
    after a warm-up of the same load in which every fault event happened once; --rss-growth
    sets the RSS bound), and so is the C library's count of heap bytes in use, where the
    build reports it (--heap-growth). The rules added
    after the baseline stay in force and hold memory by design: RSS is judged without them,
    at a cost per rule measured at the start of the run (1 000 rules in one request);
  - zero errors on allowed traffic (the load generators' errors, non-200 answers, DNS
    queries lost or answered other than NOERROR on the allowed streams);
  - zero allowed decisions for denied targets (each denied CONNECT got 403, each denied
    query REFUSED, and no decision record allows a denied target);
  - every decision record in every log file parses and has the fields of its kind, and the
    proxy counted no record it could not write;
  - the proxy is alive at the end and exits 0 on SIGTERM.
The figures go to --json, and with --markdown to the soak table in docs/benchmarks.md.
Traffic goes only to addresses inside the namespaces this script creates.
"""

import argparse
import datetime
import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from bench.lib import ROOT
from bench.lib.dns import AUTH_ADDR, wait_udp, write_streams
from bench.lib.memory import anon_by_mapping, rss_and_fds, rss_parts
from bench.lib.peers import wait_for_listen
from bench.lib.report import write_block
from bench.lib.soak import HOST, PORTS, PROXY, RATES, SoakFaults, SoakLoads, SoakTopology, udp_counters
from tests.integration.harness import netns
from tests.integration.harness.control import ControlConn


class Soak(SoakLoads, SoakFaults):
    def __init__(self, args):
        self.args = args
        self.topo = SoakTopology(os.path.abspath(args.bin_dir))
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.control_lock = threading.Lock()
        self.errors = []          # what failed, in words
        self.traffic_errors = 0   # of which errors on allowed traffic
        self.counts = {}          # what ran, by load
        self.faults = []
        self.rotations = 0

    # ---------------------------------------------------------- bookkeeping

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, text, traffic=False):
        """Records a failed check; `traffic`: an error on allowed traffic (the load's own)."""
        with self.lock:
            if traffic:
                self.traffic_errors += 1
            if len(self.errors) < 200:
                self.errors.append(text)
        print("soak: ERROR %s" % text, flush=True)

    # ---------------------------------------------------------- the proxy

    def start_proxy(self):
        t = self.topo
        self.log_dir = os.path.join(t.tmp, "log")
        os.makedirs(self.log_dir)
        self.log_path = os.path.join(self.log_dir, "decisions.ndjson")
        cfg = {
            "proxy-listen": [PROXY + ":0"],
            "dns-listen": [PROXY + ":53"],
            "upstream-dns": [AUTH_ADDR],
            "allow-http": ["*.soak.test:%d" % p for p in (PORTS["http"], PORTS["source"], PORTS["echo"],
                                                          PORTS["discard"])],
            "allow-dns": ["cached.test", "*.cached.test", "miss.test", "*.miss.test", "soak.test",
                          "*.soak.test"],
            "decision-log": self.log_path,
            "decision-log-max-bytes": 256 << 20,
            "decision-log-keep": 16,
            "max-connections": 10000,
            "dns-client-qps": 0,
            "header-timeout-ms": 2000,
            "drain-timeout-ms": 3000,
            "control-rate": 0,
        }
        path = os.path.join(t.tmp, "soak.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        sd = os.path.join(t.tmp, "session")
        env = netns.clean_env()
        if self.args.asan_quarantine_mb is not None:
            # ASan reads its options left to right: this one overrides an earlier setting.
            quarantine = "quarantine_size_mb=%d" % self.args.asan_quarantine_mb
            env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), quarantine]))
        self.proc = t.popen(t.px, [t.bin("vibepit-proxy"), "--config", path, "--session-dir", sd],
                            log="vibepit", env=env)
        wait_for_listen(t, self.proc, "vibepit", r"listening control 127\.0\.0\.1:(\d+)")
        text = t.read_log("vibepit")
        self.port = int(re.search(r"listening proxy 192\.0\.2\.1:(\d+)", text).group(1))
        control_port = int(re.search(r"listening control 127\.0\.0\.1:(\d+)", text).group(1))
        self.control = ControlConn.for_session(t, t.px, "127.0.0.1", control_port, sd)
        wait_udp(t, self.proc, "vibepit")
        self.proxy = "%s:%d" % (PROXY, self.port)

    def proxy_pid(self):
        return self.proc.pid     # `ip netns exec` execs: the pid is the proxy's

    def heap(self):
        """The proxy's heap (KiB in use, KiB free in its arenas) from /v1/stats; None where
        the allocator does not say (sanitizer builds)."""
        with self.control_lock:     # one connection, shared with the rules loop
            h = self.control.request("GET", "/v1/stats").json().get("heap")
        return {"in_use_kib": h["in_use"] // 1024, "free_kib": h["free"] // 1024} if h else None

    def at_rest(self):
        """RSS (KiB), descriptors and heap once the proxy is idle: the descriptor count has
        not changed for a second (or 20 s have passed)."""
        pid, last, still, deadline = self.proxy_pid(), None, 0, time.monotonic() + 20
        while time.monotonic() < deadline and still < 4:
            now = rss_and_fds(pid)
            still = still + 1 if last is not None and now[1] == last[1] else 0
            last = now
            time.sleep(0.25)
        self.anon_maps = anon_by_mapping(pid)
        return {"rss_kib": last[0], "fds": last[1], "rss": rss_parts(pid)[1], "heap": self.heap()}

    def rule_cost(self, n=1000):
        """Bytes of RSS one allow-http rule holds at rest, measured here: n rules added in one
        request, RSS before and after."""
        before = self.at_rest()["rss_kib"]
        r = self.control.post("/v1/allow-http", {"entries": ["c%d.calibrate.test:443" % i for i in range(n)]})
        if r.status != 200:
            raise RuntimeError("allow-http of %d rules answered %d" % (n, r.status))
        return max(0.0, (self.at_rest()["rss_kib"] - before) * 1024 / n)

    # ---------------------------------------------------------- one phase

    def phase(self, seconds):
        end = time.monotonic() + seconds
        threads = [self.loop("churn", end, self.churn), self.loop("bulk", end, self.bulk),
                   self.loop("http", end, self.http)]
        for stream in ("cached", "denied", "miss"):
            threads.append(self.loop("dns-" + stream, end, lambda s, st=stream: self.dns(st, s)))
        threads += [self.denied(end), self.rules(end), self.fault_events(end)]
        for th in threads:
            th.join(seconds + 120)
            if th.is_alive():
                self.fail("%s did not finish" % th.name)

    # ---------------------------------------------------------- the records

    def check_records(self):
        files = sorted(glob.glob(self.log_path + "*"))
        bad, total, summaries, allowed_denied, by_kind = [], 0, 0, [], {}
        need = {"decision": ("id", "ts", "src", "event", "client", "verdict", "reason", "gen"),
                "close": ("id", "ts", "src", "event", "client", "bytes_up", "bytes_down")}
        # r<N>.rules.test:443 are the rules added; <N>.rules.test:8443 never is
        denied_host = re.compile(r"(^|\.)(denied|flood)\.test$|^10\.0\.0\.1$|^\d+\.rules\.test$")
        for path in files:
            with open(path, "rb") as f:
                for raw in f:
                    total += 1
                    try:
                        r = json.loads(raw)
                        kind = r["event"]
                        missing = [k for k in need[kind] if k not in r]
                    except (ValueError, KeyError, TypeError) as e:
                        bad.append("%s: %r" % (raw[:200], e))
                        continue
                    if missing:
                        bad.append("%s lacks %s" % (raw[:200], missing))
                    by_kind[r["src"] + "/" + kind] = by_kind.get(r["src"] + "/" + kind, 0) + 1
                    summaries += 1 if r.get("count") else 0
                    name = str(r.get("host") or r.get("qname") or "").rstrip(".").lower()
                    port = r.get("port")
                    if kind == "decision" and r.get("verdict") == "allow" and (
                            denied_host.search(name) or (name == HOST and str(port) == "25")):
                        allowed_denied.append(raw[:200])
        for b in bad[:5]:
            self.fail("malformed record: %s" % b)
        for a in allowed_denied[:5]:
            self.fail("a denied target was allowed: %s" % a)
        return {"files": len(files), "records": total, "malformed": len(bad), "summaries": summaries,
                "allowed_for_denied": len(allowed_denied), "by_kind": by_kind}

    # ---------------------------------------------------------- the run

    def run(self):
        a = self.args
        t = self.topo
        t.start()
        try:
            self.streams = write_streams(t.tmp, 200000)
            self.start_proxy()
            rule_cost = self.rule_cost()
            print("soak: one rule holds %.0f bytes at rest" % rule_cost, flush=True)
            # Warm: every fault event has happened once (its code paths are paged in and its
            # buffers exist) before the baseline is taken.
            warm = max((len(self.FAULTS) + 1) * a.fault_every + 5, min(120, a.duration // 10))
            print("soak: warm-up %d s" % warm, flush=True)
            self.phase(warm)
            base = self.at_rest()
            anon0 = self.anon_maps
            rules_at_base = self.counts.get("rules_added", 0)
            print("soak: warm baseline %s; main phase %d s" % (base, a.duration), flush=True)
            samples = []
            sampler_stop = threading.Event()

            def sample():
                t0 = time.monotonic()
                while not sampler_stop.wait(5):
                    rss, fds = rss_and_fds(self.proxy_pid())
                    samples.append({"t": round(time.monotonic() - t0), "rss_kib": rss, "fds": fds,
                                    "heap": self.heap()})
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            udp0 = {ns: udp_counters(t, getattr(t, ns)) for ns in ("px", "sb")}
            t0 = time.monotonic()
            self.phase(a.duration)
            ran = time.monotonic() - t0
            udp = {ns: {k: v - udp0[ns].get(k, 0) for k, v in udp_counters(t, getattr(t, ns)).items()}
                   for ns in ("px", "sb")}
            sampler_stop.set()
            end = self.at_rest()
            # Where anonymous memory grew, by mapping: the first place to look when RSS did.
            grew = sorted(((v - anon0.get(k, 0), k) for k, v in self.anon_maps.items()), reverse=True)
            end["anon_growth_kib"] = [{"mapping": k, "kib": d} for d, k in grew[:6] if d > 0]
            print("soak: at rest after the run %s" % end, flush=True)
            stats = self.control.request("GET", "/v1/stats").json()
            unwritten = stats.get("decision_log_unwritten")
            if unwritten:
                self.fail("%s decision records could not be written" % unwritten)
            alive = self.proc.poll() is None
            if not alive:
                self.fail("the proxy exited during the soak: %s" % t.read_log("vibepit")[-2000:])
            self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                status = None
            if status != 0:
                self.fail("the proxy's exit status on SIGTERM was %s" % status)
            records = self.check_records()
            # The rules added since the baseline stay in force, and hold memory by design:
            # the bound is on what is left when that is taken out.
            rules_kib = (self.counts.get("rules_added", 0) - rules_at_base) * rule_cost / 1024
            rss_residual = end["rss_kib"] - rules_kib
            if rss_residual > base["rss_kib"] * (1 + a.rss_growth):
                self.fail("RSS at rest grew from %d to %d KiB, %d KiB of it for the rules added; the "
                          "rest is over %.0f%% of the baseline"
                          % (base["rss_kib"], end["rss_kib"], rules_kib, 100 * a.rss_growth))
            # The heap in use, where the allocator says: a leak shows here without the
            # allocator's high-water noise that RSS carries.
            heap_residual = None
            if base.get("heap") and end.get("heap"):
                heap_residual = end["heap"]["in_use_kib"] - rules_kib
                if heap_residual > base["heap"]["in_use_kib"] * (1 + a.heap_growth):
                    self.fail("heap in use at rest grew from %d to %d KiB, %d KiB of it for the rules "
                              "added; the rest is over %.0f%% of the baseline"
                              % (base["heap"]["in_use_kib"], end["heap"]["in_use_kib"], rules_kib,
                                 100 * a.heap_growth))
            if end["fds"] > base["fds"] * 1.05:
                self.fail("open descriptors at rest grew from %d to %d" % (base["fds"], end["fds"]))
            peak = max(samples, key=lambda s: s["rss_kib"]) if samples else None
            return {
                "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release),
                "duration_s": round(ran), "scale": a.scale, "fault_every_s": a.fault_every,
                "rss_growth_allowed": a.rss_growth,
                "rates": {k: int(v * a.scale) for k, v in RATES.items()},
                "baseline": base, "end": end, "peak": peak,
                "rss_ratio": end["rss_kib"] / base["rss_kib"], "fds_ratio": end["fds"] / base["fds"],
                "rule_cost_bytes": rule_cost, "rules_kib": rules_kib,
                "rss_residual_ratio": rss_residual / base["rss_kib"],
                "heap_residual_ratio": heap_residual / base["heap"]["in_use_kib"] if heap_residual else None,
                "counts": self.counts, "faults": self.faults, "records": records,
                "udp_drops": udp,
                "decision_log_unwritten": unwritten, "exit_status": status,
                "errors": self.errors, "traffic_errors": self.traffic_errors,
                "passed": not self.errors, "samples": samples,
            }
        finally:
            self.stop.set()
            t.close()


def heap_row(base, end, residual_ratio):
    if not base or not end:
        return "not known (the allocator does not say)"
    return "%d KiB → %d KiB (%+.1f%%; without the rules %+.1f%%); free inside the heap %d KiB → %d KiB" % (
        base["in_use_kib"], end["in_use_kib"], 100 * (end["in_use_kib"] / base["in_use_kib"] - 1),
        100 * (residual_ratio - 1), base["free_kib"], end["free_kib"])


def render(res, path):
    c, rec = res["counts"], res["records"]
    faults = {}
    for f in res["faults"]:
        faults[f["event"]] = faults.get(f["event"], 0) + 1
    lines = [
        "Run: %s, %s, %d s of mixed load after a warm-up, a fault event every %d s." % (
            res["when"], res["machine"], res["duration_s"], res["fault_every_s"]),
        "",
        "| measurement | result |",
        "|---|---|",
        "| offered load | %d tunnels/s (CONNECT churn), %d requests/s (keep-alive HTTP), "
        "%d queries/s on each DNS stream (cached, denied, miss), one bulk tunnel 2 s in every 10, "
        "a denied CONNECT every 0.2 s, one rule a second |"
        % (res["rates"]["churn"], res["rates"]["http"], res["rates"]["dns"]),
        "| work done | %d tunnels, %d HTTP requests, %.1f GB bulk, %d DNS queries, %d denied CONNECTs, %d rules added |"
        % (c.get("churn_tunnels", 0), c.get("http_requests", 0), c.get("bulk_bytes", 0) / 1e9,
           sum(v for k, v in c.items() if k.startswith("dns_")), c.get("denied_requests", 0),
           c.get("rules_added", 0)),
        "| fault events | %s |" % ", ".join("%s ×%d" % kv for kv in sorted(faults.items())),
        "| RSS at rest: warm baseline → after the run | %d KiB → %d KiB (%+.1f%%; peak under load %s KiB) |"
        % (res["baseline"]["rss_kib"], res["end"]["rss_kib"], 100 * (res["rss_ratio"] - 1),
           res["peak"]["rss_kib"] if res["peak"] else "?"),
        "| of which the rules added since the baseline (%d bytes each, measured in this run) "
        "| %d KiB; the rest %+.1f%% |"
        % (res["rule_cost_bytes"], res["rules_kib"], 100 * (res["rss_residual_ratio"] - 1)),
        "| heap in use at rest (the C library's count): warm baseline → after the run | %s |"
        % heap_row(res["baseline"].get("heap"), res["end"].get("heap"), res.get("heap_residual_ratio")),
        "| open descriptors at rest: warm baseline → after the run | %d → %d |"
        % (res["baseline"]["fds"], res["end"]["fds"]),
        "| decision records | %d in %d files, %d malformed, %d summaries of folded denials, %d unwritten |"
        % (rec["records"], rec["files"], rec["malformed"], rec["summaries"], res["decision_log_unwritten"] or 0),
        "| errors on allowed traffic, denied targets allowed | %d, %d |"
        % (res["traffic_errors"], rec["allowed_for_denied"]),
        "| result | %s |" % ("passed" if res["passed"] else "**failed**: " + "; ".join(res["errors"][:3])),
    ]
    # docs/benchmarks.md ends with the soak section: a first run appends the block there
    write_block(path, "soak", lines, writer="bench/soak.sh")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--duration", type=int, default=1800, help="seconds of the main phase")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every offered rate")
    ap.add_argument("--fault-every", type=int, default=10, help="seconds between fault events")
    ap.add_argument("--rss-growth", type=float, default=0.05,
                    help="how much RSS at rest may grow over the warm baseline (0.05: 5%%); the "
                         "sanitizer builds need more, for shadow memory and ASan's quarantine")
    ap.add_argument("--asan-quarantine-mb", type=int, default=None,
                    help="an ASan build's quarantine for the proxy (ASan's default is 256 MB): "
                         "freed memory it holds back fills it over minutes, and RSS grows with it "
                         "until it is full, so a small one is full by the end of the warm-up and RSS "
                         "at rest measures the proxy")
    ap.add_argument("--heap-growth", type=float, default=0.05,
                    help="how much the heap in use at rest may grow over the warm baseline, the "
                         "rules added taken out (release builds; sanitizer builds do not report it)")
    ap.add_argument("--json", default=os.path.join(ROOT, "build", "soak.json"))
    ap.add_argument("--markdown", default=None, help="write the soak table into this markdown file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("soak: needs root (network namespaces)")
    netns.install_signal_cleanup()
    res = Soak(args).run()
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    if args.markdown:
        render(res, args.markdown)
    summary = {k: res[k] for k in ("baseline", "end", "counts", "records", "passed")}
    print("soak: %s" % json.dumps(summary))
    for e in res["errors"]:
        print("soak: failed: %s" % e)
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
