"""Where the benchmarks' results go: a JSON file, and a generated block of a markdown
file (docs/benchmarks.md)."""

import json
import os
import re


def write_block(path, name, lines, heading="", writer="bench/compare.sh"):
    """Replace the generated block `name` in the markdown at `path` (or append it, under
    `heading`). The block sits between <!-- NAME:begin ... --> and <!-- NAME:end -->, and its
    first line names the `writer`."""
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    block = "\n".join(["<!-- %s:begin (written by %s; do not edit by hand) -->" % (name, writer)]
                      + lines + ["<!-- %s:end -->" % name])
    pattern = r"<!-- %s:begin.*?<!-- %s:end -->" % (re.escape(name), re.escape(name))
    if re.search(pattern, text, flags=re.S):
        text = re.sub(pattern, lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + heading + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def publish(res, lines, json_path, markdown, block, writer):
    """A bench script's end: its results as JSON at `json_path`, its table on standard
    output and, with `markdown`, as the generated block `block` of that file."""
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(lines))
    if markdown:
        write_block(markdown, block, lines, writer=writer)


def run_facts(**fields):
    """A result's first fields: when it was measured and on what machine, then `fields`."""
    import datetime
    return {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": "%d cores, %s" % (os.cpu_count(), os.uname().release), **fields}


def replay(args, render, block, command):
    """--render JSON: the table written again from a kept run, nothing measured. True when
    that was asked for (and done)."""
    if not args.render:
        return False
    with open(args.render) as f:
        res = json.load(f)
    publish(res, render(res), args.render, args.markdown, block, command)
    return True
