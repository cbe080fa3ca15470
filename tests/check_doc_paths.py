#!/usr/bin/env python3
"""Every path a document names exists: README.md, docs/*.md and the seed-study notes name files and
folders of this repository (engine/train/step.cpp, studies/ladder/, configs/ladder_cpu.yaml), and a
move that leaves one behind sends a reader to nothing. A path is a token that starts with one of
the repository's top folders and a '/'; a glob (*), a placeholder (<name>, NAME, ...) or a `:line`
suffix is allowed; paths under results/ and build*/ are written by runs, not committed, and are
not checked. Comments in the code that cite a path are checked too (// ... engine/core/ops.h).

    tests/check_doc_paths.py [ROOT]      fails naming each missing path and where it is cited
    tests/check_doc_paths.py --self-test plants a document with a stale path and a good one in a
                                         scratch tree and fails unless exactly the stale one is found
"""
import pathlib
import re
import sys
import tempfile

TOP = ["apps", "backends", "bench", "comm", "configs", "docs", "engine", "examples", "kernels", "models", "scripts",
       "studies", "tests", "third_party", "cmake"]
DOCS = ["README.md", "docs/*.md", "studies/*/README.md", "examples/*/README.md"]
CODE = ["apps", "backends", "bench", "comm", "engine", "examples", "kernels", "models", "studies"]
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./*<>{}-]*[\w*>}/])" % "|".join(TOP))


def candidates(text):
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".")
        p = re.sub(r":\d+(-\d+)?$", "", p)
        yield p


def exists(root, p):
    if any(c in p for c in "<>{}") or re.search(r"/[A-Z][A-Z_]+(/|\.|$)", p):
        # a placeholder: only the part before it must exist
        head = re.split(r"[<{]|/[A-Z][A-Z_]+(?=/|\.|$)", p)[0]
        head = head[: head.rfind("/") + 1] if "/" in head else head
        return (root / head).exists() if head else True
    if "*" in p:
        return any(root.glob(p))
    return (root / p).exists()


def sources(root):
    for pattern in DOCS:
        for f in sorted(root.glob(pattern)):
            yield f
    for folder in CODE:
        for f in sorted((root / folder).rglob("*")):
            if f.suffix in (".cpp", ".h", ".cu", ".cuh", ".py", ".sh"):
                yield f


def check(root):
    missing = []
    for f in sources(root):
        text = f.read_text(errors="replace")
        is_code = f.suffix != ".md"
        for number, line in enumerate(text.split("\n"), 1):
            if is_code:
                # only what a comment cites (after // or #), not include lines or strings
                m = re.search(r"(//|^\s*#(?!include|pragma|define|if|endif|else))(.*)$", line)
                if not m:
                    continue
                line = m.group(2)
            for p in candidates(line):
                if not exists(root, p):
                    missing.append(f"{f.relative_to(root)}:{number}: '{p}' does not exist")
    return missing


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "engine/core").mkdir(parents=True)
        (root / "models").mkdir()
        (root / "engine/core/ops.h").write_text("// engine/core/ops.h: the ops\n")
        (root / "engine/core/a.cpp").write_text('#include "engine/core/ops.h"\n// see engine/tensor.h\n')
        (root / "docs/A.md").write_text("The ops are in `engine/core/ops.h`, a model in models/<name>/, "
                                        "any engine/core/*.h; the old engine/tensor.cpp is gone.\n")
        found = check(root)
        want = {"docs/A.md:1: 'engine/tensor.cpp' does not exist", "engine/core/a.cpp:2: 'engine/tensor.h' does not exist"}
        if set(found) != want:
            print("self-test FAILED: found", found, "wanted", sorted(want))
            return 1
    print("self-test: the stale paths (a document's and a comment's) found, the good ones and the placeholders passed")
    return 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    missing = check(root)
    for m in missing:
        print(m)
    if missing:
        print(f"{len(missing)} path(s) named in documents or comments do not exist (a move left them behind)")
        return 1
    print("every path the documents and comments name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
