#!/usr/bin/env python3
"""The layout rules of docs/code-map.md, checked: each folder (and each room of launcher/,
launcher/<room>/) is one library whose public headers live under include/vibepit/<name>/,
and a library includes headers only of the libraries it may depend on. Exit 0 when the tree
holds to them; 1, with one line per breach, when it does not.

    python3 -m scripts.check_layout [ROOT]      # check the tree (default: this checkout)
    python3 -m scripts.check_layout --self-test # prove the check fails on a planted breach
"""

import os
import re
import shutil
import sys
import tempfile

# library -> the libraries whose headers it may include (itself always). A library's name
# is its folder and its headers' prefix: launcher/session/ includes
# "vibepit/launcher/session/...". The launcher's rooms point one way: host at the bottom;
# guard, rules, images and monitor on it; session on those; cli on top. ci needs only policy.
ROOMS_BELOW_CLI = {"launcher/session", "launcher/ci", "launcher/images", "launcher/rules",
                   "launcher/guard", "launcher/host", "launcher/monitor"}
ALLOWED = {
    "secret": set(),
    "policy": {"secret"},
    "http": {"policy"},
    "tls": {"policy"},
    "config": {"policy"},
    "decision_log": {"policy"},
    "runtime": {"config", "decision_log", "http", "policy"},
    "proxy": {"runtime", "config", "decision_log", "http", "tls", "policy", "secret"},
    "dns": {"runtime", "config", "decision_log", "policy"},
    "control": {"runtime", "config", "decision_log", "http", "tls", "policy", "secret"},
    "appliance": {"proxy", "dns", "control", "runtime", "config", "decision_log", "http",
                  "tls", "policy", "secret"},
    "docker": {"http"},
    "launcher/host": set(),
    "launcher/guard": {"launcher/host", "control"},
    "launcher/rules": {"launcher/host", "control", "policy"},
    "launcher/images": {"launcher/host", "docker"},
    "launcher/session": {"launcher/images", "launcher/rules", "launcher/guard", "launcher/host",
                         "docker", "control", "tls", "runtime", "config", "policy", "secret"},
    "launcher/ci": {"policy"},
    "launcher/monitor": {"launcher/host"},
    "launcher/cli": ROOMS_BELOW_CLI | {"docker", "control", "runtime", "config", "http", "policy",
                                       "secret"},
}
FOLDERS = {name: name for name in ALLOWED}
# Folders made of rooms: every source in them belongs to one of their rooms.
PARENTS = {name.split("/")[0] for name in ALLOWED if "/" in name}
INCLUDE = re.compile(r'^\s*#\s*include\s+"vibepit/([a-z_/]+)/[^/"]*"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cc")


def library_of(rel):
    """The library a file under ROOT belongs to (longest folder first), or None."""
    best = None
    for name, folder in FOLDERS.items():
        if rel == folder or rel.startswith(folder + os.sep):
            if best is None or len(folder) > len(FOLDERS[best]):
                best = name
    return best


def library_included(directory):
    """The library whose header "vibepit/<directory>/x.hpp" is (longest name first), or, when
    none is, the directory's first component (which no library may include)."""
    best = None
    for name in ALLOWED:
        if directory == name or directory.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best or directory.split("/")[0]


def check(root):
    problems = []
    for name, folder in FOLDERS.items():
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append("%s/: the folder of library %s is missing" % (folder, name))
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir.split(os.sep)[0] in (".git", "tests", "bench") or rel_dir.startswith("build"):
            dirnames[:] = []
            continue
        for fn in filenames:
            if not fn.endswith(SOURCES):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, fn))
            lib = library_of(rel)
            if lib is None:
                top = rel.split(os.sep)[0]
                if top in PARENTS:
                    problems.append("%s: outside every room of %s/ (%s)" % (
                        rel, top, ", ".join(sorted(n for n in ALLOWED if n.startswith(top + "/")))))
                continue
            folder = FOLDERS[lib]
            inner = os.path.relpath(rel, folder)
            if inner.startswith("include" + os.sep) and not inner.startswith(
                    os.path.join("include", "vibepit", lib) + os.sep):
                problems.append("%s: a public header of %s belongs under %s/include/vibepit/%s/"
                                % (rel, lib, folder, lib))
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                used = library_included(m.group(1))
                if used != lib and used not in ALLOWED[lib]:
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append("%s:%d: %s includes vibepit/%s/, but %s may depend only on %s"
                                    % (rel, line, lib, used, lib,
                                       ", ".join(sorted(ALLOWED[lib])) or "nothing"))
    return problems


def self_test():
    """A copy of the tree's folders with one planted breach of each kind must fail."""
    tmp = tempfile.mkdtemp(prefix="check-layout-")
    try:
        for folder in set(FOLDERS.values()):
            os.makedirs(os.path.join(tmp, folder), exist_ok=True)
        clean = check(tmp)
        assert clean == [], clean
        with open(os.path.join(tmp, "dns", "x.cpp"), "w") as f:
            f.write('#include "vibepit/dns/a.hpp"\n#include "vibepit/proxy/server.hpp"\n')
        os.makedirs(os.path.join(tmp, "http", "include", "vibepit", "proxy"))
        with open(os.path.join(tmp, "http", "include", "vibepit", "proxy", "h.hpp"), "w") as f:
            f.write("#pragma once\n")
        with open(os.path.join(tmp, "decision_log", "y.cpp"), "w") as f:
            f.write('#include "vibepit/runtime/loop.hpp"\n')
        # The launcher's rooms: a lower room that includes a higher one, a header of the
        # launcher from before the rooms, a header outside its room's include/vibepit/launcher/
        # <room>/, and a source in launcher/ but in no room.

        def plant(rel, text):
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        plant("launcher/session/src/s.cpp", '#include "vibepit/launcher/session/a.hpp"\n'
              '#include "vibepit/launcher/host/b.hpp"\n#include "vibepit/launcher/cli/c.hpp"\n')
        plant("launcher/host/src/h.cpp", '#include "vibepit/launcher/process.hpp"\n')
        plant("launcher/rules/include/vibepit/launcher/r.hpp", "#pragma once\n")
        plant("launcher/stray.cpp", "\n")
        found = check(tmp)
        assert any("dns/x.cpp:2: dns includes vibepit/proxy/" in p for p in found), found
        assert any("a public header of http belongs under" in p for p in found), found
        assert any("launcher/session/src/s.cpp:3: launcher/session includes vibepit/launcher/cli/"
                   in p for p in found), found
        assert any("launcher/host/src/h.cpp:1: launcher/host includes vibepit/launcher/," in p
                   for p in found), found
        assert any("a public header of launcher/rules belongs under "
                   "launcher/rules/include/vibepit/launcher/rules/" in p for p in found), found
        assert any("launcher/stray.cpp: outside every room of launcher/" in p
                   for p in found), found
        assert any("decision_log/y.cpp:1: decision_log includes vibepit/runtime/" in p
                   for p in found), found
        assert len(found) == 7, found
        shutil.rmtree(os.path.join(tmp, "control"))
        assert any("library control is missing" in p for p in check(tmp))
        shutil.rmtree(os.path.join(tmp, "launcher", "ci"))
        assert any("library launcher/ci is missing" in p for p in check(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check-layout self-test: a planted include (a lower room of the launcher including a "
          "higher one too), a misplaced header, a source outside the launcher's rooms and a "
          "missing folder are each reported")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    if problems:
        print("check-layout: %d breach%s of the rules in docs/code-map.md"
              % (len(problems), "" if len(problems) == 1 else "es"))
        return 1
    print("check-layout: every library includes only what it may depend on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
