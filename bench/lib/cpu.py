"""What a system under test costs in CPU, read from /proc.

Two figures, kept apart:
  - the process tree's own time: utime + stime of the root process and of every live
    descendant, plus the time of the descendants they have already reaped (cutime + cstime).
    For a multi-threaded process /proc/PID/stat already sums its threads.
  - each core's softirq time from /proc/stat. Packet processing that the kernel does outside
    any process's system call (the receive path of a veth pair, for one) lands there; on a
    pinned core it is the part of the system's cost that no process is charged for.

Both are in USER_HZ ticks (10 ms here), so a measurement should run for seconds, not
milliseconds.
"""

import os
import time

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat cpuN columns: user nice system idle iowait irq softirq steal ...
_STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _proc_stat(pid):
    """(ppid, utime + stime + cutime + cstime in ticks) of one process."""
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    # The command name is in parentheses and may hold spaces or ')': cut after the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is the state; ppid is field 4 of the man page, utime..cstime fields 14-17.
    return int(fields[1]), sum(int(x) for x in fields[11:15])


def tree_ticks(root):
    """CPU ticks used so far by `root` and its descendants (0 if root is gone)."""
    children, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            ppid, t = _proc_stat(pid)
        except (OSError, ValueError, IndexError):
            continue                      # exited while we looked
        children.setdefault(ppid, []).append(pid)
        ticks[pid] = t
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def tree_pids(root):
    """`root` and every live descendant."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid, _ = _proc_stat(int(entry))
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_switches(root):
    """Context switches so far of every thread of `root` and its descendants: each
    voluntary one is a wake-up after a sleep."""
    total = 0
    for pid in tree_pids(root):
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
            except OSError:
                continue
    return total


def at_rest(pid, seconds=5.0):
    """What a started system costs with no traffic at all: wake-ups per second and
    CPU-milliseconds per minute (what each idle session on a host pays)."""
    return at_rest_all({None: pid}, seconds)[None]


def at_rest_all(pids, seconds=5.0):
    """at_rest() of several systems over one shared window: {name: pid} -> {name: figures}."""
    w0 = time.monotonic()
    before = {n: (tree_switches(p), tree_ticks(p)) for n, p in pids.items()}
    time.sleep(seconds)
    w1 = time.monotonic()
    wall = w1 - w0
    out = {}
    for n, p in pids.items():
        s0, t0 = before[n]
        s1, t1 = tree_switches(p), tree_ticks(p)
        out[n] = {"wakeups_per_s": (s1 - s0) / wall, "cpu_ms_per_min": (t1 - t0) * TICK_S * 1000 * 60 / wall,
                  "seconds": wall}
    return out


def core_ticks():
    """{core: {column: ticks}} for every core, from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0].startswith("cpu") and parts[0] != "cpu":
                out[int(parts[0][3:])] = dict(zip(_STAT_COLUMNS, (int(x) for x in parts[1:9])))
    return out


class Meter:
    """CPU used by one process tree and by the cores between start() and stop().

        m = Meter(pid).start(); ...load...; cost = m.stop()
        cost["process_s"], cost["softirq_s"][core], cost["busy_s"][core], cost["wall_s"]

    With pid None only the cores are measured (the no-proxy ceiling has no process)."""

    def __init__(self, pid):
        self.pid = pid

    def _sample(self):
        return (time.monotonic(), tree_ticks(self.pid) if self.pid else 0, core_ticks())

    def start(self):
        self.t0 = self._sample()
        return self

    def stop(self):
        w0, p0, c0 = self.t0
        w1, p1, c1 = self._sample()
        softirq, busy = {}, {}
        for core in c1:
            d = {k: c1[core][k] - c0.get(core, {}).get(k, 0) for k in _STAT_COLUMNS}
            softirq[core] = d["softirq"] * TICK_S
            # Steal is time the hypervisor gave to someone else: not this core's work.
            busy[core] = sum(d[k] for k in ("user", "nice", "system", "irq", "softirq")) * TICK_S
        return {"wall_s": w1 - w0,
                "process_s": (p1 - p0) * TICK_S if self.pid else None,
                "softirq_s": softirq, "busy_s": busy}
