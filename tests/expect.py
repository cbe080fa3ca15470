#!/usr/bin/env python3
"""Runs a command and passes only when it exits with the expected status AND its output (stdout and
stderr together) matches a regular expression. ctest's PASS_REGULAR_EXPRESSION alone ignores the
exit status, so a program that printed the expected line and then crashed would pass: every test
that checks a line goes through this instead.

    tests/expect.py [--status N] REGEX -- COMMAND [ARG ...]      (N: 0 by default)
"""
import re
import subprocess
import sys


def main():
    args = sys.argv[1:]
    status = 0
    if args[:1] == ["--status"]:
        status, args = int(args[1]), args[2:]
    if "--" not in args or args.index("--") != 1:
        sys.exit("usage: expect.py [--status N] REGEX -- COMMAND [ARG ...]")
    pattern, command = args[0], args[2:]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = result.stdout.decode(errors="replace")
    sys.stdout.write(output)
    problems = []
    if result.returncode != status:
        problems.append(f"exit status {result.returncode}, expected {status}")
    if not re.search(pattern, output, re.DOTALL):
        problems.append(f"no match for {pattern!r} in the output")
    if problems:
        print("expect.py: FAILED: " + "; ".join(problems))
        return 1
    print(f"expect.py: ok (exit status {status}, output matches)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
