#!/usr/bin/env python3
"""No function over MAX lines and no file over MAX_FILE lines outside tests and third_party: a long
function is where a reader gets lost, a long file is a room that holds two, so both are checked, not
hoped for. A function is a definition at namespace or class scope: a line that ends a signature with
'{' (after a ')', 'const', 'override', 'noexcept' or a trailing return type), its head found by
walking back to the '(' that opens the parameter list (which may be lines above, and may hold default
arguments), through its matching '}'. Lambdas inside a function count towards it. Comments and
string literals are stripped before braces are counted.

    tests/check_function_length.py [ROOT] [--max N] [--max-file N]   (defaults 100 and 800)
    tests/check_function_length.py --self-test   plants functions and a file in a scratch tree and
                                                 fails unless the check finds exactly the long ones
"""
import pathlib
import re
import sys
import tempfile

FOLDERS = ["kernels", "backends", "engine", "models", "comm", "bench", "studies", "apps", "examples"]
SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
SIGNATURE_END = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override|final)?\s*(->\s*[\w:<>,\s*&]+)?\s*\{\s*$")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|else|do|return)\b|^\s*\}\s*(else|catch)\b|\b(if|for|while|switch)\s*$")


def strip(text):
    # Block comments, line comments, raw strings, strings and characters, keeping line breaks.
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'R"(\w*)\((.*?)\)\1"', lambda m: '""' + "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])'", "''", text)
    return text


def signature_head(lines, index):
    """(line index, head text) of the '(' that matches the last ')' on lines[index], walking back
    over the lines of a multi-line parameter list; None when it does not close."""
    depth = 0
    for i in range(index, max(-1, index - 60), -1):
        line = lines[i]
        end = line.rfind(")") if i == index else len(line) - 1
        for j in range(end, -1, -1):
            c = line[j]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    return i, line[:j]
    return None


def functions(path):
    lines = strip(path.read_text(errors="replace")).split("\n")
    depth = 0
    found = []
    start = None
    start_depth = 0
    name = ""
    for number, line in enumerate(lines, 1):
        if start is None and SIGNATURE_END.search(line):
            opened = signature_head(lines, number - 1)
            if opened is not None:
                first, head = opened
                # not a control statement, not a lambda assigned to a name (the '=' before the
                # parameter list: a default argument's '=' lies inside it)
                if head.split() and not CONTROL.search(head) and "=" not in head.replace("operator=", ""):
                    start, start_depth, name = first + 1, depth, head.split()[-1]
        depth += line.count("{") - line.count("}")
        if start is not None and depth <= start_depth:
            found.append((name, start, number, number - start + 1))
            start = None
    return found


def check(root, limit, file_limit):
    long = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root)
            lines = path.read_text(errors="replace").count("\n")
            if lines > file_limit:
                long.append((lines, f"{rel}: the file is {lines} lines (over {file_limit}: split it by concern)"))
            for name, first, last, length in functions(path):
                if length > limit:
                    long.append((length, f"{rel}:{first}-{last}: {name} is {length} lines"))
    return [line for _, line in sorted(long, reverse=True)]


def planted_function(name, body_lines, signature):
    body = "".join(f"  x += {i};\n" for i in range(body_lines - len(signature) - 1))
    return "".join(signature) + body + "}\n"


def self_test():
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        (root / "engine" / "core").mkdir(parents=True)
        source = (
            # 152 lines, its signature over three lines with a default argument (missed before)
            planted_function("multi", 152, ["static int multi_line(int a,\n", "                      int b = 3,\n",
                                            "                      const char* c = \"{\") {\n"])
            # 101 lines, a one-line signature
            + planted_function("one", 101, ["int one_line(int x) {\n"])
            # 100 lines: at the limit, allowed
            + planted_function("at", 100, ["int at_limit(int x) const {\n"])
            # a lambda assigned to a name is part of no function at namespace scope
            + "auto lambda = [](int x) {\n" + "  x += 1;\n" * 150 + "};\n"
        )
        (root / "engine" / "core" / "planted.cpp").write_text(source)
        (root / "engine" / "core" / "long_file.h").write_text("// a line\n" * 801)
        problems = check(root, 100, 800)
    for p in problems:
        print("caught: " + p)
    expected = ["multi_line is 152 lines", "one_line is 101 lines", "long_file.h: the file is 801 lines"]
    missed = [e for e in expected if not any(e in p for p in problems)]
    if missed or len(problems) != len(expected):
        print(f"self-test FAILED: {len(problems)} found for {len(expected)} planted; missed: {missed}")
        return 1
    print(f"self-test: all {len(expected)} planted long functions and files caught, the one at the limit passed")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    args = sys.argv[1:]
    limit, file_limit, rest = 100, 800, []
    i = 0
    while i < len(args):
        if args[i] == "--max":
            limit, i = int(args[i + 1]), i + 2
        elif args[i] == "--max-file":
            file_limit, i = int(args[i + 1]), i + 2
        else:
            rest.append(args[i])
            i += 1
    root = pathlib.Path(rest[0] if rest else pathlib.Path(__file__).resolve().parent.parent)
    long = check(root, limit, file_limit)
    for line in long:
        print(line)
    if long:
        print(f"{len(long)} function(s) over {limit} lines or file(s) over {file_limit} lines (split them: a "
              f"function a reader can hold, a file of one concern)")
        return 1
    print(f"every function outside tests is at most {limit} lines, every file at most {file_limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
