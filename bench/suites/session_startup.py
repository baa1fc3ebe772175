"""Time from `vibepit run -- true` and `vibepit ci -- true` to their exit, with the images
present, on a real Docker engine (the e2e fake internet as the egress network, so nothing
leaves the machine), beside the baseline measured in the same run: `true` in a plain
container of the same sandbox image (create, start, wait, remove over the Engine API, as
`docker run --rm` does). The three are interleaved, run by run, so a slow moment of the
machine costs each alike. Prints medians, spreads, the ratio to the baseline, vibepit's own
CPU time, and the proxy image's size.

    python3 -m bench.suites.session_startup --bin-dir build/bin [--runs 10]
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from tests.e2e import e2e_harness as h


def sandbox_image(uid):
    """The default sandbox image for `uid`, as vibepit built it."""
    images = json.loads(subprocess.run([os.path.join(h.BIN, "vibepit"), "image", "ls", "--json"],
                                       capture_output=True, text=True).stdout)
    for i in images:
        if i["kind"] == "sandbox" and any(t.endswith("-%d-%d" % (uid, uid)) for t in i["tags"]):
            return i["tags"][0]
    sys.exit("no sandbox image for uid %d" % uid)


def plain_container(image):
    """`true` in a plain container: create, start, wait, remove."""
    status, body = h.docker_api("POST", "/containers/create", {
        "Image": image, "Cmd": ["true"], "Labels": {h.TEST_LABEL: "bench"}})
    if status != 201:
        sys.exit("create failed: %s" % body)
    cid = body["Id"]
    try:
        for method, path in (("POST", "/containers/%s/start" % cid),
                             ("POST", "/containers/%s/wait" % cid)):
            status, body = h.docker_api(method, path, timeout=60)
            if status not in (200, 204):
                sys.exit("%s %s failed: %s" % (method, path, body))
    finally:
        h.docker_api("DELETE", "/containers/%s?force=1" % cid)


def main():
    runs = 10
    if "--runs" in sys.argv:
        i = sys.argv.index("--runs")
        runs = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    h.BIN = h.reachable_copy(h.bin_dir())
    if os.geteuid() != 0 or not h.docker_ready():
        sys.exit("needs root and a running Docker engine")
    inet = h.FakeInternet().start()
    ws = h.Workspace()
    try:
        common = ["-q", "--upstream-dns", h.DNS_ADDR]
        commands = {"vibepit run -- true": ["run", "-T"] + common + ["--", "true"],
                    "vibepit ci -- true": ["ci"] + common + ["--", "true"]}
        for name, args in commands.items():   # a first run builds the user's image
            warm = ws.vibepit(inet, args)
            if warm.returncode != 0:
                sys.exit("%s failed: %s" % (name, warm.stderr))
        image = sandbox_image(ws.uid)
        times = {name: [] for name in ["plain container: true"] + list(commands)}
        cpu = {name: [] for name in commands}
        for _ in range(runs):
            t0 = time.monotonic()
            plain_container(image)
            times["plain container: true"].append(time.monotonic() - t0)
            for name, args in commands.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.monotonic()
                r = ws.vibepit(inet, args)
                times[name].append(time.monotonic() - t0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime -
                                 before.ru_stime)
                if r.returncode != 0:
                    sys.exit("%s failed: %s" % (name, r.stderr))
        base = statistics.median(times["plain container: true"])
        for name, t in times.items():
            line = "%s, %d runs: median %.2f s (min %.2f, max %.2f)" % (
                name, runs, statistics.median(t), min(t), max(t))
            if name in cpu:
                line += "; %.1fx the plain container; vibepit's own CPU %.3f s per run" % (
                    statistics.median(t) / base, statistics.median(cpu[name]))
            print(line)
        images = json.loads(subprocess.run([os.path.join(h.BIN, "vibepit"), "image", "ls", "--json"],
                                           capture_output=True, text=True).stdout)
        proxy = [i for i in images if i["kind"] == "proxy"]
        for i in proxy:
            print("proxy image %s: %.1f MB" % (",".join(i["tags"]), i["size"] / 1e6))
    finally:
        ws.close()
        inet.close()


if __name__ == "__main__":
    main()
