"""What the project's filter (project_guard.hpp) costs: one file-heavy job run on a directory
directly and through `vibepit __project-guard`'s view of it, side by side in one run, as the
sandbox's user. The job (a fresh tree each round): make FILES small files in 50 directories,
stat every one (what `git status` and build tools do), read them all, rename half, remove
the tree. Rounds alternate direct and filtered, so a slow moment of the machine costs each
alike. With two or more cores the filter's server is pinned to one core and the job to
another. Prints per phase the median wall time of each, their ratio, and CPU-seconds per
1000 files: the job's own, and (filtered) the server's beside it.

    sudo python3 -m bench.suites.project_filter --bin-dir build/bin [--files 3000] [--rounds 5]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

UID = 4244  # the job runs as this user, as the agent would
PHASES = ("create", "stat", "read", "rename", "remove")

JOB = r'''
import os, sys, time, resource
root, files = sys.argv[1], int(sys.argv[2])
t = {}
def phase(name, fn):
    c0 = resource.getrusage(resource.RUSAGE_SELF); w0 = time.perf_counter()
    fn()
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    t[name] = (time.perf_counter() - w0, c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
dirs = [os.path.join(root, "d%02d" % i) for i in range(50)]
paths = [os.path.join(dirs[i % 50], "f%05d.c" % i) for i in range(files)]
def create():
    for d in dirs: os.mkdir(d)
    for p in paths:
        with open(p, "w") as f: f.write("int x;\n" * 8)
def stat():
    for _ in range(3):
        for d in dirs:
            for e in os.scandir(d): e.stat(follow_symlinks=False)
def read():
    for p in paths:
        with open(p) as f: f.read()
def rename():
    for p in paths[::2]: os.rename(p, p + ".o")
def remove():
    for d in dirs:
        for e in os.scandir(d): os.unlink(e.path)
        os.rmdir(d)
for name, fn in (("create", create), ("stat", stat), ("read", read), ("rename", rename), ("remove", remove)):
    phase(name, fn)
print(" ".join("%s=%f,%f" % (k, v[0], v[1]) for k, v in t.items()))
'''


def cpu_of(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid(view):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"__project-guard" in argv and view.encode() in argv:
                return int(p)
    sys.exit("the filter's server is not running")


def run_job(where, files, cpu):
    argv = ["setpriv", "--reuid", str(UID), "--regid", str(UID), "--clear-groups", "--",
            sys.executable, "-c", JOB, where, str(files)]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu)] + argv
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("the job failed in %s: %s" % (where, r.stderr))
    out = {}
    for kv in r.stdout.split():
        k, v = kv.split("=")
        wall, cpu_s = v.split(",")
        out[k] = (float(wall), float(cpu_s))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="build/bin")
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the filter is mounted as vibepit run as root mounts it")
    ncpu = os.cpu_count() or 1
    job_cpu, server_cpu = (0, 1) if ncpu >= 2 else (None, None)
    tmp = tempfile.mkdtemp(prefix="vp-filter-bench-")
    os.chmod(tmp, 0o755)
    real, view = os.path.join(tmp, "project"), os.path.join(tmp, "view")
    os.makedirs(real)
    os.makedirs(view)
    os.chown(real, UID, UID)
    try:
        r = subprocess.run([os.path.join(a.bin_dir, "vibepit"), "__project-guard", real, view,
                            "bench%d" % os.getpid(), str(UID), str(UID), os.path.join(tmp, "log")],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            sys.exit("the filter did not start: " + r.stderr)
        pid = server_pid(view)
        if server_cpu is not None:
            for task in os.listdir("/proc/%d/task" % pid):
                os.sched_setaffinity(int(task), {server_cpu})
        direct, filtered, server = [], [], []
        for _ in range(a.rounds):
            direct.append(run_job(real, a.files, job_cpu))
            c0 = cpu_of(pid)
            filtered.append(run_job(view, a.files, job_cpu))
            server.append(cpu_of(pid) - c0)
    finally:
        subprocess.run(["umount", "-l", view], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    per_k = 1000.0 / a.files
    print("project filter: %d files, %d rounds, job on cpu %s, server on cpu %s" %
          (a.files, a.rounds, job_cpu, server_cpu))
    print("%-8s %12s %12s %7s %16s %16s" % ("phase", "direct ms", "filtered ms", "ratio",
                                            "job CPU-ms/1k d", "job CPU-ms/1k f"))
    for ph in PHASES:
        d = statistics.median(x[ph][0] for x in direct) * 1000
        f = statistics.median(x[ph][0] for x in filtered) * 1000
        dc = statistics.median(x[ph][1] for x in direct) * 1000 * per_k
        fc = statistics.median(x[ph][1] for x in filtered) * 1000 * per_k
        print("%-8s %12.1f %12.1f %7.2f %16.1f %16.1f" % (ph, d, f, f / d if d else 0, dc, fc))
    d = statistics.median(sum(x[p][0] for p in PHASES) for x in direct) * 1000
    f = statistics.median(sum(x[p][0] for p in PHASES) for x in filtered) * 1000
    print("%-8s %12.1f %12.1f %7.2f" % ("all", d, f, f / d))
    print("the filter's server: %.1f CPU-ms per 1000 files (median of rounds, all phases)" %
          (statistics.median(server) * 1000 * per_k))


if __name__ == "__main__":
    main()
