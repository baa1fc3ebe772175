"""What a process holds: RSS and its parts, descriptors, and the proxy's memory per idle
tunnel."""

import json
import os
import re
import time

from bench.lib.topology import PORTS
from bench.lib.workloads import bench


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for %d" % pid)


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def holdings(topo, pid):
    """What process `pid` (in "px") holds: its descriptors by kind, and its TCP sockets by
    state with up to five lines of `ss` for each."""
    kinds, states, sample = {}, {}, []
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue   # closed meanwhile
        kind = target.split(":")[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    ss = topo.run(topo.px, ["ss", "-tanpo"], timeout=30).stdout.decode(errors="replace")
    for line in ss.splitlines():
        if "pid=%d," % pid in line:
            state = line.split()[0]
            states[state] = states.get(state, 0) + 1
            if states[state] <= 5:
                sample.append(" ".join(line.split()))
    return {"kinds": kinds, "tcp_states": states, "tcp_sample": sample}


def idle_memory(topo, proc, proxy, count, hold, spare_fds):
    """Proxy RSS growth per idle tunnel while `count` tunnels are open."""
    # Warm the proxy up so allocator arenas and code pages are not charged to tunnels.
    bench(topo, ["idle-tunnels", "--proxy", proxy, "--target", "allowed.test:%d" % PORTS["discard"],
                 "--count", "200", "--hold", "1"], 60)
    time.sleep(0.5)
    # The count leaves the proxy `spare_fds` descriptors beside two per tunnel, and every
    # one it still holds past that costs tunnels (refused for want of descriptors).
    # Connections of the runs before may still be closing: wait for them.
    deadline = time.monotonic() + 30
    while open_fds(proc.pid) > spare_fds and time.monotonic() < deadline:
        time.sleep(0.2)
    fds = open_fds(proc.pid)
    leftover = holdings(topo, proc.pid) if fds > spare_fds else None
    if leftover:
        print("compare: the proxy still holds %d descriptors: %s" % (fds, leftover), flush=True)
    before = rss_kib(proc.pid)
    ready = os.path.join(topo.tmp, "idle.ready")
    if os.path.exists(ready):
        os.unlink(ready)
    out = os.path.join(topo.tmp, "idle.json")
    p = topo.popen(topo.sb, [topo.bin("vibepit-bench"), "idle-tunnels",
                             "--proxy", proxy, "--target", "allowed.test:%d" % PORTS["discard"],
                             "--count", str(count), "--hold", str(hold), "--ready-file", ready,
                             "--out", out], log="idle")
    deadline = time.monotonic() + 120
    while not os.path.exists(ready):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("idle-tunnels did not get ready: " + topo.read_log("idle"))
        time.sleep(0.1)
    time.sleep(1.0)
    during = rss_kib(proc.pid)
    with open(ready) as f:
        established = int(f.read().split()[0])
    p.wait(hold + 60)
    topo.stop_process(p)
    with open(out) as f:
        errors = json.load(f).get("errors", {})
    return {"tunnels": established, "of": count, "errors": errors, "proxy_fds_before": fds,
            "leftover": leftover, "rss_before_kib": before, "rss_during_kib": during,
            "kib_per_tunnel": (during - before) / max(established, 1)}


def rss_and_fds(pid):
    rss, _ = rss_parts(pid)
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def anon_by_mapping(pid):
    """Anonymous KiB per mapping (/proc/PID/smaps), keyed by start address and name (a heap
    that grows keeps its start)."""
    out, key = {}, None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$", line)
            if m:
                key = (m.group(1) + " " + m.group(2)).strip()
            elif line.startswith("Anonymous:") and key:
                out[key] = int(line.split()[1])
    return out


def rss_parts(pid):
    """VmRSS, and its anonymous and file-backed parts (KiB): code pages a first fault touches
    are file-backed, a heap that grew is anonymous."""
    with open("/proc/%d/status" % pid) as f:
        kib = {k: int(v) for k, v in re.findall(r"^(VmRSS|RssAnon|RssFile):\s+(\d+)", f.read(), re.M)}
    return kib["VmRSS"], {"anon_kib": kib.get("RssAnon", 0), "file_kib": kib.get("RssFile", 0)}
