#!/usr/bin/env python3
"""No function over MAX lines outside tests: a long function is where a reader gets lost, so the
limit is checked, not hoped for. A function is a definition at namespace or class scope: a line
that ends a signature with '{' (after a ')' , 'const', 'override', 'noexcept' or a trailing return
type), through its matching '}'. Lambdas inside a function count towards it. Comments and string
literals are stripped before braces are counted.

    tests/check_function_length.py [ROOT] [--max N]     (default 120)
"""
import pathlib
import re
import sys

FOLDERS = ["kernels", "backends", "engine", "comm", "bench", "studies", "apps", "examples"]
SIGNATURE_END = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*(->\s*[\w:<>,\s*&]+)?\s*\{\s*$")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|else|do)\b|^\s*\}\s*(else|catch)\b")


def strip(text):
    # Block comments, line comments, raw strings, strings and characters, keeping line breaks.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'R"(\w*)\((.*?)\)\1"', lambda m: '""' + "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])'", "''", text)
    return text


def functions(path):
    lines = strip(path.read_text(errors="replace")).split("\n")
    depth = 0
    found = []
    start = None
    start_depth = 0
    name = ""
    for number, line in enumerate(lines, 1):
        if start is None and SIGNATURE_END.search(line) and not CONTROL.search(line) and "=" not in line.split("(")[0]:
            # a definition opens here (not a lambda assigned to a name, not a control statement)
            head = line.split("(")[0].split()
            if head:
                start, start_depth, name = number, depth, head[-1]
        depth += line.count("{") - line.count("}")
        if start is not None and depth <= start_depth:
            found.append((name, start, number, number - start + 1))
            start = None
    return found


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    limit = 120
    if "--max" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--max") + 1])
        args = [a for a in args if a != str(limit)]
    root = pathlib.Path(args[0] if args else pathlib.Path(__file__).resolve().parent.parent)
    long = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".cu") or not path.is_file():
                continue
            for name, first, last, length in functions(path):
                if length > limit:
                    long.append((length, f"{path.relative_to(root)}:{first}-{last}: {name} is {length} lines"))
    for _, line in sorted(long, reverse=True):
        print(line)
    if long:
        print(f"{len(long)} function(s) over {limit} lines (split them: a function a reader can hold)")
        return 1
    print(f"every function outside tests is at most {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
