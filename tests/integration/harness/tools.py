"""The external commands the tests and benchmarks run, checked before they run.

scripts/deps.txt says which Debian package provides each command; a missing one fails
with that package's name instead of a bare FileNotFoundError deep inside a test."""

import os
import shutil

DEPS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                    "scripts", "deps.txt"))
_FLAG = {"build": "", "test": " --test", "bench": " --bench"}


class MissingTool(RuntimeError):
    """A command the test needs is not installed."""


def providers(path=DEPS):
    """{command: (package, group)} from scripts/deps.txt."""
    table = {}
    with open(path) as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if len(fields) < 3:
                continue
            group, package = fields[0], fields[1].rstrip("?")  # PACKAGE?: only if missing
            for command in fields[2:]:
                table[command] = (package, group)
    return table


def missing_message(command, table=None):
    known = (table if table is not None else providers()).get(command)
    if known is None:
        return ("`%s` is not installed, and scripts/deps.txt names no Debian package that "
                "provides it: add it there so that scripts/install-deps.sh installs it" % command)
    package, group = known
    return ("`%s` is not installed: it comes from the Debian package %s, which "
            "scripts/install-deps.sh%s installs" % (command, package, _FLAG.get(group, "")))


def need(command):
    """The path of `command` (a name looked up on PATH, or a path), or MissingTool."""
    if os.sep in command:
        if os.access(command, os.X_OK):
            return command
        raise MissingTool("%s is not an executable file" % command)
    path = shutil.which(command)
    if path is None:
        raise MissingTool(missing_message(command))
    return path
