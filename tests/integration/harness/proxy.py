"""Start vibepit-proxy inside px with a test config and read what it says."""

import json
import os
import re
import signal
import time

from .wait import LIVENESS_S, poll, wait_until, within

LISTEN_RE = re.compile(r"listening proxy (\S+):(\d+)")
DNS_LISTEN_RE = re.compile(r"listening dns (\S+):(\d+)")
CONTROL_LISTEN_RE = re.compile(r"listening control (\S+):(\d+)")

# Short deadlines: every timeout a test waits for stays small.
BASE_CONFIG = {
    "proxy-listen": ["127.0.0.1:0"],
    "upstream-dns": ["203.0.113.2:53"],
    "allow-http": [],
    "allow-dns": [],
    "block-cidr": [],
    "threads": 2,
    "splice": "auto",
    "header-timeout-ms": 2000,
    "connect-timeout-ms": 1000,
    "idle-timeout-ms": 20000,
    "resolve-timeout-ms": 1000,
    "drain-timeout-ms": 2000,
    "max-request-head": 16384,
    "max-connections": 512,
    "decision-ring": 1000,
}

_n = [0]


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer",
                     "runtime error:")


class ProxyError(RuntimeError):
    pass


class Proxy:
    def __init__(self, topo, bin_dir, **overrides):
        """overrides use python names: allow_http=[...] -> "allow-http"."""
        _n[0] += 1
        self.topo = topo
        self.binary = os.path.join(bin_dir, "vibepit-proxy")
        self.name = "proxy%d" % _n[0]
        self.log_path = os.path.join(topo.tmp, self.name + "-decisions.ndjson")
        # argv_prefix runs the proxy under a wrapper, e.g. ["prlimit", "--nofile=64:64", "--"].
        self.argv_prefix = list(overrides.pop("argv_prefix", None) or [])
        # extra_args follow the config: ["--session-dir", DIR]; pass_fds go to the child.
        self.extra_args = list(overrides.pop("extra_args", None) or [])
        self.pass_fds = tuple(overrides.pop("pass_fds", None) or ())
        # env: the proxy's environment, in place of the harness's clean one.
        self.env = overrides.pop("env", None)
        self.config = dict(BASE_CONFIG)
        self.config["decision-log"] = self.log_path
        for k, v in overrides.items():   # None removes a key: upstream_dns=None
            if v is None:
                self.config.pop(k.replace("_", "-"), None)
            else:
                self.config[k.replace("_", "-")] = v
        self.config_path = os.path.join(topo.tmp, self.name + ".json")
        self.stderr_path = os.path.join(topo.tmp, self.name + ".stderr")
        self.proc = None
        self.host = self.port = None
        self.dns_listeners = []
        self.dns_host = self.dns_port = None

    # ---------------------------------------------------------- lifecycle

    def write_config(self, raw=None):
        with open(self.config_path, "w") as f:
            f.write(raw if raw is not None else json.dumps(self.config, indent=1))

    def spawn(self, raw_config=None, extra_args=None):
        self.write_config(raw_config)
        argv = self.argv_prefix + [self.binary, "--config", self.config_path] + list(extra_args or [])
        self.stderr_file = open(self.stderr_path, "wb")
        extra = {"env": self.env} if self.env is not None else {}
        self.proc = self.topo.popen(self.topo.px, argv, stdout=self.stderr_file, stderr=self.stderr_file,
                                    pass_fds=self.pass_fds, **extra)
        self.stderr_file.close()
        return self.proc

    def start(self, timeout=LIVENESS_S):
        self.spawn(extra_args=self.extra_args)
        # A control API with credentials listens on TCP, unless a control socket alone is set.
        want_control = 1 if any(a in ("--session-dir", "--credentials-fd") for a in self.extra_args) \
            and not (self.config.get("control-socket") and not self.config.get("control-listen")) \
            else 0
        want = len(self.config.get("proxy-listen") or [None])
        want_dns = len(self.config.get("dns-listen") or [])

        def listening():
            err = self.stderr()
            found = (LISTEN_RE.findall(err), DNS_LISTEN_RE.findall(err), CONTROL_LISTEN_RE.findall(err))
            if len(found[0]) >= want and len(found[1]) >= want_dns and len(found[2]) >= want_control:
                return found
            if self.proc.poll() is not None:
                raise ProxyError("vibepit-proxy exited %s before listening:\n%s"
                                 % (self.proc.returncode, self.stderr()))
            return None
        found = wait_until(listening, timeout=timeout, interval=0.02)
        if not found:
            self.stop(signal.SIGKILL)
            raise ProxyError("vibepit-proxy did not report %d 'listening proxy' and %d "
                             "'listening dns' lines in %.0fs:\n%s"
                             % (want, want_dns, timeout, self.stderr()))
        found, found_dns, found_control = found
        self.control_listeners = [(h.strip("[]"), int(port)) for h, port in found_control]
        # every listener as (host without brackets, port); the first one is the default
        self.listeners = [(h.strip("[]"), int(port)) for h, port in found]
        self.host, self.port = self.listeners[0]
        self.dns_listeners = [(h.strip("[]"), int(port)) for h, port in found_dns]
        if self.dns_listeners:
            self.dns_host, self.dns_port = self.dns_listeners[0]
        return self

    def wait_exit(self, timeout):
        """Wait for exit; returns (status, seconds) or (None, seconds)."""
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout)
        except Exception:
            return None, time.monotonic() - t0
        return self.proc.returncode, time.monotonic() - t0

    def exit_deadline_s(self):
        """How long the proxy may take to exit after SIGTERM: drain-timeout-ms, then "at
        most about one second" (docs/config.md)."""
        return self.config.get("drain-timeout-ms", 2000) / 1000.0 + 1.0

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Signal the proxy; SIGKILL (a status that fails the caller) if it outlives its
        exit deadline with slack."""
        if self.proc is None:
            return None
        if timeout is None:
            timeout = within(self.exit_deadline_s())
        return self.topo.stop_process(self.proc, sig=sig, timeout=timeout)

    def rss_kib(self):
        """The process's resident set (VmRSS), KiB."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def sanitized(self):
        """Whether the binary was built with ASan or TSan (their allocator, not glibc's)."""
        with open(self.binary, "rb") as f:
            data = f.read()
        return b"__asan_init" in data or b"__tsan_init" in data

    def sanitizer_report(self):
        """The first sanitizer report in stderr, or None."""
        err = self.stderr()
        for marker in SANITIZER_MARKERS:
            i = err.find(marker)
            if i >= 0:
                return err[max(0, i - 200):i + 3000]
        return None

    def shutdown_problem(self):
        """SIGTERM the proxy if it runs; describe a non-zero exit or a sanitizer report, else None."""
        if self.proc is None:
            return None
        was_running = self.alive()
        status = self.stop(signal.SIGTERM)
        report = self.sanitizer_report()
        if report:
            return "sanitizer report from %s:\n%s" % (self.name, report)
        if was_running and status != 0:
            return "%s exited with status %s after SIGTERM%s" % (self.name, status, self.diag())
        return None

    def exited_within(self, seconds):
        """True if the process is gone now or within `seconds` (a crash just after a reply)."""
        try:
            self.proc.wait(seconds)
            return True
        except Exception:
            return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr(self):
        try:
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def threads(self):
        """One line per thread of the process: id, name, state (R running, S sleeping, D in
        the kernel), and where it sleeps in the kernel (wchan: ep_poll is an event loop
        waiting for work, futex_wait_queue a thread blocked on a lock or condition)."""
        base = "/proc/%d/task" % self.proc.pid
        try:
            tids = sorted(os.listdir(base), key=int)
        except OSError as e:
            return "unreadable (%s)" % e

        def read(tid, name):
            try:
                with open(os.path.join(base, tid, name)) as f:
                    return f.read().strip()
            except OSError:
                return "?"
        lines = []
        for tid in tids:
            stat = read(tid, "stat")
            state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
            lines.append("%s %-15s %s wchan=%s" % (tid, read(tid, "comm"), state, read(tid, "wchan")))
        return "\n".join(lines)

    def diag(self):
        """Text for assertion messages: tail of stderr and decision log."""
        return "\n--- proxy stderr (tail) ---\n%s\n--- decision log (tail) ---\n%s" % (
            self.stderr()[-3000:], "\n".join(json.dumps(r) for r in self.records()[-10:]))

    # ---------------------------------------------------------- decision log

    def records(self):
        out = []
        try:
            with open(self.log_path) as f:
                for line in f:
                    line = line.strip()
                    if line:
                        try:
                            out.append(json.loads(line))
                        except ValueError:
                            out.append({"_unparsable": line})
        except OSError:
            pass
        return out

    def wait_records(self, pred, count=1, timeout=LIVENESS_S):
        """Poll the decision log until `count` records match pred; return them."""
        return poll(lambda: [r for r in self.records() if pred(r)], lambda found: len(found) >= count,
                    timeout=timeout)

    def dns_records(self, pred=None):
        """Decision-log records of the DNS server (src "dns"), optionally filtered by pred."""
        return [r for r in self.records() if r.get("src") == "dns" and (pred is None or pred(r))]

    def wait_dns_records(self, pred=None, count=1, timeout=LIVENESS_S):
        """Poll until `count` DNS records match pred; return them."""
        return self.wait_records(lambda r: r.get("src") == "dns" and (pred is None or pred(r)),
                                 count=count, timeout=timeout)
