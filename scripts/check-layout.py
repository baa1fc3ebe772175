#!/usr/bin/env python3
"""The layout rules of docs/code-map.md, checked: each folder is one library whose public
headers live under include/vibepit/<name>/, and a library includes headers only of the
libraries it may depend on. Exit 0 when the tree holds to them; 1, with one line per
breach, when it does not.

    scripts/check-layout.py [ROOT]      # check the tree (default: this checkout)
    scripts/check-layout.py --self-test # prove the check fails on a planted breach
"""

import os
import re
import shutil
import sys
import tempfile

# library -> the libraries whose headers it may include (itself always). Folders: the
# library's name.
ALLOWED = {
    "policy": set(),
    "http": {"policy"},
    "runtime": {"policy"},
    "proxy": {"runtime", "http", "policy"},
    "dns": {"runtime", "policy"},
    "control": {"runtime", "http", "policy"},
    "appliance": {"proxy", "dns", "control", "runtime", "http", "policy"},
    "docker": {"http"},
    "launcher": {"docker", "control", "runtime", "http", "policy"},
}
FOLDERS = {name: name for name in ALLOWED}
INCLUDE = re.compile(r'^\s*#\s*include\s+"vibepit/([a-z_]+)/', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cc")


def library_of(rel):
    """The library a file under ROOT belongs to (longest folder first), or None."""
    best = None
    for name, folder in FOLDERS.items():
        if rel == folder or rel.startswith(folder + os.sep):
            if best is None or len(folder) > len(FOLDERS[best]):
                best = name
    return best


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
                used = m.group(1)
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
        found = check(tmp)
        assert any("dns/x.cpp:2: dns includes vibepit/proxy/" in p for p in found), found
        assert any("a public header of http belongs under" in p for p in found), found
        assert len(found) == 2, found
        shutil.rmtree(os.path.join(tmp, "control"))
        assert any("library control is missing" in p for p in check(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check-layout self-test: a planted include, a misplaced header and a missing folder "
          "are each reported")


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
