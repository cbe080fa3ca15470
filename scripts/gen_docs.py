#!/usr/bin/env python3
"""Regenerates the parts of docs/ that come from the code, so that they cannot drift from it:

  docs/CONFIG.md   every train config key: `trainlab config-reference` (the table that parses them)
  docs/TOOLS.md    each tool's flags: its own --help, between <!-- help:TOOL:begin/end --> markers

    scripts/gen_docs.py [BIN_DIR]            rewrite the files (BIN_DIR defaults to build/bin)
    scripts/gen_docs.py [BIN_DIR] --check    write nothing; exit 1, saying which file and block
                                             differ, when a committed file is not what the code says
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The bench tools initialise MPI before parsing; as root OpenMPI needs these, as scripts/mpirun sets.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(argv):
    result = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120)
    if result.returncode != 0:
        sys.exit(f"gen_docs: {' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def help_text(bin_dir, tool):
    words = tool.split()
    # Defaults that contain this checkout's path are written with <source> in its place.
    text = run([os.path.join(bin_dir, words[0]), *words[1:], "--help"]).replace(ROOT, "<source>")
    return text.rstrip() + "\n"


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv[1:]
    bin_dir = os.path.abspath(args[0]) if args else os.path.join(ROOT, "build", "bin")
    differ = []

    def emit(path, text):
        with open(path) as f:
            old = f.read()
        if old == text:
            return
        if check:
            differ.append(path)
        else:
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            print(f"gen_docs: {os.path.relpath(path, ROOT)} updated")

    emit(os.path.join(ROOT, "docs", "CONFIG.md"), run([os.path.join(bin_dir, "trainlab"), "config-reference"]))

    tools_path = os.path.join(ROOT, "docs", "TOOLS.md")
    with open(tools_path) as f:
        text = f.read()
    pattern = re.compile(r"(<!-- help:(?P<tool>[^:>]+):begin -->\n)(?P<body>.*?)(<!-- help:(?P=tool):end -->)", re.S)

    def block(m):
        return m.group(1) + "```\n" + help_text(bin_dir, m.group("tool")) + "```\n" + m.group(4)

    emit(tools_path, pattern.sub(block, text))
    if differ:
        for path in differ:
            print(f"gen_docs: {os.path.relpath(path, ROOT)} differs from what the code says; run scripts/gen_docs.py")
        return 1
    if check:
        print("gen_docs: docs/CONFIG.md and the --help blocks of docs/TOOLS.md match the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
