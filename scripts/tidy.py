"""clang-tidy over vibepit's own sources, as .clang-tidy configures it.

    python3 -m scripts.tidy [--build-dir build] [--jobs N] [FILE...]

Every library and program source in BUILD/compile_commands.json is checked (tests,
benchmarks and fuzz targets are not: -Wall -Wextra -Werror covers them); FILE... narrows
that. Any warning fails, and its text is printed with the file's name.

clang-tidy takes seconds per file, most of it in Asio's headers, so a file found clean is
remembered, as ccache remembers a compilation: under ${XDG_CACHE_HOME:-~/.cache}/vibepit/tidy,
by a hash of everything its result depends on: the content of the source and of every
header it includes (the build's own record of them, `ninja -t deps`; a file the build has
not compiled is preprocessed instead), the compile flags, .clang-tidy and clang-tidy's
version, with the checkout's path taken out so that a fresh clone elsewhere finds what an
earlier one checked. Only clean results are kept: a file with warnings is checked again on
every run. The last line says how many
came from that cache ("hits=H misses=M", as scripts/test.sh reports for ccache).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_CHECKED = ("tests/", "bench/", "fuzz/")
# clang reads the flags g++ compiled with: GCC-only warnings are not errors to it, and
# Asio finds C++20 coroutines through these where clang with libstdc++ does not detect them.
# What clang-tidy says on every run, warnings or not: counts of what it suppressed.
NOISE = re.compile(r"^(\d+ warnings? generated\.|Suppressed \d+ warnings? .*|Use -header-filter=.*)$")
EXTRA_ARGS = ["-Wno-unknown-warning-option", "-DASIO_HAS_CO_AWAIT=1", "-DASIO_HAS_STD_COROUTINE=1"]


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "vibepit", "tidy")


def sources(build_dir, only):
    """The compile_commands.json entries of the files to check, by path from ROOT."""
    path = os.path.join(build_dir, "compile_commands.json")
    try:
        with open(path) as f:
            entries = json.load(f)
    except OSError as e:
        sys.exit("tidy: %s: %s (build first: scripts/build.sh release)" % (path, e.strerror))
    picked = {}
    for e in entries:
        rel = os.path.relpath(os.path.join(e["directory"], e["file"]), ROOT)
        if rel.startswith("..") or rel.startswith(NOT_CHECKED) or rel.startswith("build"):
            continue
        if only and rel not in only:
            continue
        picked[rel] = e
    missing = sorted(set(only) - set(picked))
    if missing:
        sys.exit("tidy: not a checked source in %s: %s" % (path, " ".join(missing)))
    return picked


def preprocess_argv(entry):
    """The entry's compile command, made to print the preprocessed source with comments
    (a NOLINT is a comment) and without line markers (which carry the checkout's path)."""
    argv = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        out.append(a)
    return out + ["-E", "-P", "-C", "-o", "-"]


def build_deps(build_dir):
    """{object path as in the compile command: [source and headers, absolute]}, from ninja."""
    r = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True, text=True)
    deps, current = {}, None
    for line in r.stdout.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            # STALE: the source changed after the build read it; it is preprocessed instead
            current = deps.setdefault(line.split(": #deps", 1)[0], []) if "(VALID)" in line else None
        elif current is not None:
            current.append(os.path.normpath(os.path.join(build_dir, line.strip())))
    return deps


def output_of(entry):
    argv = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    return argv[argv.index("-o") + 1] if "-o" in argv else None


_file_hashes = {}


def file_hash(path):
    if path not in _file_hashes:
        with open(path, "rb") as f:
            _file_hashes[path] = hashlib.sha256(f.read()).hexdigest()
    return _file_hashes[path]


def key(entry, fixed, deps):
    """What the file's clang-tidy result depends on, hashed: the build's list of what the
    source includes when it has one, else the preprocessed source."""
    argv = preprocess_argv(entry)
    files = deps.get(output_of(entry))
    if files:
        try:
            h = hashlib.sha256(fixed)
            h.update(" ".join(argv).replace(ROOT, "@").encode())
            for path in sorted(files):
                h.update(("%s %s\n" % (path.replace(ROOT, "@"), file_hash(path))).encode())
            return h.hexdigest()
        except OSError:
            pass  # a header gone since the build: preprocess
    pre = subprocess.run(argv, cwd=entry["directory"], capture_output=True)
    if pre.returncode != 0:
        return None  # let clang-tidy say what is wrong
    h = hashlib.sha256(fixed)
    h.update(" ".join(argv).replace(ROOT, "@").encode())
    h.update(pre.stdout.replace(ROOT.encode(), b"@"))
    return h.hexdigest()


def check(rel, entry, build_dir, fixed, deps, cache):
    """(rel, from_cache, warnings text or "")."""
    k = key(entry, fixed, deps)
    mark = os.path.join(cache, k[:2], k) if k else None
    if mark and os.path.exists(mark):
        return rel, True, ""
    argv = ["clang-tidy", "--quiet", "-p", build_dir] + ["--extra-arg=" + a for a in EXTRA_ARGS]
    r = subprocess.run(argv + [os.path.join(ROOT, rel)], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        text = "\n".join(line for line in (r.stdout + r.stderr).splitlines() if not NOISE.match(line))
        return rel, False, text.strip() or "clang-tidy exited %d" % r.returncode
    if mark:
        os.makedirs(os.path.dirname(mark), exist_ok=True)
        with open(mark, "w") as f:
            f.write(rel + "\n")
    return rel, False, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("files", nargs="*", help="sources, by path from the checkout's top")
    args = ap.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    picked = sources(build_dir, set(args.files))

    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, check=True).stdout
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        fixed = version + f.read() + " ".join(EXTRA_ARGS).encode()
    cache = cache_dir()
    deps = build_deps(build_dir)

    t0 = time.monotonic()
    hits = bad = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        jobs = [pool.submit(check, rel, e, build_dir, fixed, deps, cache) for rel, e in sorted(picked.items())]
        for job in concurrent.futures.as_completed(jobs):
            rel, cached, text = job.result()
            hits += cached
            if text:
                bad += 1
                print("== tidy: %s ==\n%s" % (rel, text), flush=True)
    took = time.monotonic() - t0
    print("tidy: %d files, %d with warnings (%.0f s; hits=%d misses=%d)"
          % (len(picked), bad, took, hits, len(picked) - hits))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
