"""Time from `vibepit run -- true` and `vibepit ci -- true` to their exit, with the images
present, on Docker and on rootful Podman (each with an e2e fake internet as its egress
network, so nothing leaves the machine), beside the baseline measured in the same run on
the same engine: `true` in a plain container of the same sandbox image (create, start,
wait, remove over the Engine API, as `docker run --rm` does). Every measurement on every
engine is interleaved run by run, so a slow moment of the machine costs each alike. Prints
medians, spreads, the ratio to the engine's plain container, vibepit's own CPU time, and
where one `vibepit run -- true` spends its time (its progress lines, stamped as they come).

    python3 -m bench.suites.session_startup --bin-dir build/bin [--runs 10] [--engines docker,podman]

Podman runs vibepit as root (its socket is root's); the agent is the workspace's owner on
both. An engine that does not answer is left out, and the output says so.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time

from tests.e2e import e2e_harness as h

NETS = {"docker": "198.51.100", "podman": "203.0.113"}


def engine_extra(engine):
    return {"DOCKER_HOST": "unix://" + h.SOCKETS[engine]} if engine == "podman" else {}


def sandbox_image(engine, uid):
    """The default sandbox image for `uid` on `engine`, as vibepit built it."""
    out = subprocess.run([os.path.join(h.BIN, "vibepit"), "image", "ls", "--json"],
                         capture_output=True, text=True, env=h.engine_env(engine)).stdout
    for i in json.loads(out):
        if i["kind"] == "sandbox" and any(t.endswith("-%d-%d" % (uid, uid))
                                          for t in i["tags"] or []):
            return i["tags"][0]
    sys.exit("no sandbox image for uid %d on %s" % (uid, engine))


def ulimits():
    """The limits vibepit gives its containers (launcher/session/src/session.cpp): without
    them rootful Podman asks for more than a host that denies it CAP_SYS_RESOURCE allows,
    and its plain `run --rm` fails."""
    out = []
    for name, res, cap in (("nofile", resource.RLIMIT_NOFILE, 1 << 20),
                           ("nproc", resource.RLIMIT_NPROC, 1 << 15)):
        hard = resource.getrlimit(res)[1]
        n = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        out.append({"Name": name, "Soft": n, "Hard": n})
    return out


def plain_container(engine, image):
    """`true` in a plain container: create, start, wait, remove."""
    status, body = h.docker_api("POST", "/containers/create", {
        "Image": image, "Cmd": ["true"], "Labels": {h.TEST_LABEL: "bench"},
        "HostConfig": {"Ulimits": ulimits()}}, engine=engine)
    if status != 201:
        sys.exit("%s: create failed: %s" % (engine, body))
    cid = body["Id"]
    try:
        for method, path in (("POST", "/containers/%s/start" % cid),
                             ("POST", "/containers/%s/wait" % cid)):
            status, body = h.docker_api(method, path, timeout=60, engine=engine)
            if status not in (200, 204):
                sys.exit("%s: %s %s failed: %s" % (engine, method, path, body))
    finally:
        h.docker_api("DELETE", "/containers/%s?force=1" % cid, engine=engine)


def answers(engine):
    try:
        return h.docker_api("GET", "/_ping", timeout=5, engine=engine)[0] == 200
    except OSError:
        return False


def stamped_run(ws, inet, args, extra):
    """One `vibepit ARGS` with its progress lines, each with the seconds since the start."""
    t0 = time.monotonic()
    p = ws.vibepit_popen(inet, args, extra_env=extra)
    lines = []
    for line in p.stderr:
        lines.append((time.monotonic() - t0, line.rstrip()))
    p.wait(120)
    p.stdout.close()
    p.stderr.close()
    lines.append((time.monotonic() - t0, "(exit %d)" % p.returncode))
    return lines


def main():
    runs = 10
    engines = ["docker", "podman"]
    for flag in ("--runs", "--engines"):
        if flag in sys.argv:
            i = sys.argv.index(flag)
            value = sys.argv[i + 1]
            del sys.argv[i:i + 2]
            if flag == "--runs":
                runs = int(value)
            else:
                engines = value.split(",")
    h.BIN = h.reachable_copy(h.bin_dir())
    if os.geteuid() != 0:
        sys.exit("needs root")
    for e in list(engines):
        if not answers(e):
            print("%s: no engine answers on %s; left out" % (e, h.SOCKETS[e]))
            engines.remove(e)
    if not engines:
        sys.exit("no engine answers")
    inets, spaces = {}, {}
    try:
        for e in engines:
            # The base image as root builds it (debootstrap needs root); the workspace user's
            # own image is built FROM it by the warm-up run below.
            r = subprocess.run([os.path.join(h.BIN, "vibepit"), "image", "build", "--base",
                                "debootstrap", "--no-pull", "-q"], capture_output=True, text=True,
                               timeout=900, env=dict(h.engine_env(e), VIBEPIT_TEST_LABEL="bench"))
            if r.returncode != 0:
                sys.exit("%s: vibepit image build failed: %s" % (e, r.stderr))
            inets[e] = h.FakeInternet(e, NETS[e]).start()
            spaces[e] = h.Workspace(as_root=(e == "podman"))
        common = ["-q", "--upstream-dns"]
        commands = {}
        for e in engines:
            dns = inets[e].dns_addr
            commands[e] = {"vibepit run -- true": ["run", "-T"] + common + [dns, "--", "true"],
                           "vibepit ci -- true": ["ci"] + common + [dns, "--", "true"]}
            for name, args in commands[e].items():   # a first run builds the user's image
                warm = spaces[e].vibepit(inets[e], args, timeout=900, extra_env=engine_extra(e))
                if warm.returncode != 0:
                    sys.exit("%s on %s failed: %s" % (name, e, warm.stderr))
        images = {e: sandbox_image(e, spaces[e].uid) for e in engines}
        times = {(e, n): [] for e in engines
                 for n in ["plain container: true"] + list(commands[e])}
        cpu = {(e, n): [] for e in engines for n in commands[e]}
        for _ in range(runs):
            for e in engines:
                t0 = time.monotonic()
                plain_container(e, images[e])
                times[(e, "plain container: true")].append(time.monotonic() - t0)
                for name, args in commands[e].items():
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.monotonic()
                    r = spaces[e].vibepit(inets[e], args, extra_env=engine_extra(e))
                    times[(e, name)].append(time.monotonic() - t0)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu[(e, name)].append(after.ru_utime + after.ru_stime - before.ru_utime -
                                          before.ru_stime)
                    if r.returncode != 0:
                        sys.exit("%s on %s failed: %s" % (name, e, r.stderr))
        print("| engine | measurement | median | min | max | ratio to the engine's plain "
              "container | vibepit's own CPU per run |")
        print("|---|---|---|---|---|---|---|")
        for e in engines:
            version = h.docker_api("GET", "/version", engine=e)[1].get("Version", "?")
            base = statistics.median(times[(e, "plain container: true")])
            for (engine, name), t in times.items():
                if engine != e:
                    continue
                ratio = "%.1fx" % (statistics.median(t) / base) if (e, name) in cpu else "1"
                own = "%.3f s" % statistics.median(cpu[(e, name)]) if (e, name) in cpu else ""
                print("| %s %s | %s | %.2f s | %.2f s | %.2f s | %s | %s |" % (
                    e, version, name, statistics.median(t), min(t), max(t), ratio, own))
        for e in engines:
            print("\nwhere `vibepit run -- true` spends its time on %s (one run, progress lines):"
                  % e)
            args = [a for a in commands[e]["vibepit run -- true"] if a != "-q"]
            for t, line in stamped_run(spaces[e], inets[e], args, engine_extra(e)):
                print("  %6.3f s  %s" % (t, line.strip()))
    finally:
        for ws in spaces.values():
            ws.close()
        for inet in inets.values():
            inet.close()


if __name__ == "__main__":
    main()
