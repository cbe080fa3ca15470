#!/usr/bin/env python3
"""The Debian package lists (scripts/packages.sh), checked against the packages themselves.

install-deps.sh installs TRAINLAB_BUILD_PACKAGES (with the host's tools); fetch-device-debs.sh
downloads TRAINLAB_BUILD_PACKAGES and TRAINLAB_DEVICE_RUNTIME_PACKAGES for a machine without apt,
where dpkg -x resolves no dependency. So every dependency (Pre-Depends and Depends, the first of
alternatives) of every fetched package must itself be fetched, or be declared present everywhere
(TRAINLAB_DEVICE_ASSUMED) or not needed (TRAINLAB_DEVICE_NOT_NEEDED); a -dev package's dependency
on another -dev package is its own business (headers for features the build does not use). And every
package the two scripts name must exist on this machine's Debian (installed, as install-deps.sh
leaves it), so a typo cannot hide. Reads dpkg's database; prints every problem and exits 1.

    tests/check_packages.py SOURCE_DIR
"""
import re
import subprocess
import sys


def array(root, name):
    out = subprocess.run(["bash", "-c", f'source scripts/packages.sh && printf "%s\\n" "${{{name}[@]}}"'],
                         cwd=root, capture_output=True, text=True, check=True).stdout
    return [line for line in out.split() if line]


def field(package, name):
    result = subprocess.run(["dpkg-query", "-W", "-f", "${" + name + "}", package], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


def depends(package):
    text = (field(package, "Pre-Depends") or "") + "," + (field(package, "Depends") or "")
    for entry in text.split(","):
        entry = entry.strip()
        if entry:
            yield re.split(r"[ (:]", entry.split("|")[0].strip())[0]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    build = array(root, "TRAINLAB_BUILD_PACKAGES")
    host = array(root, "TRAINLAB_HOST_PACKAGES")
    runtime = array(root, "TRAINLAB_DEVICE_RUNTIME_PACKAGES")
    assumed = set(array(root, "TRAINLAB_DEVICE_ASSUMED"))
    not_needed = set(array(root, "TRAINLAB_DEVICE_NOT_NEEDED"))
    fetched = set(build) | set(runtime)
    problems = []
    # The one list: both scripts take theirs from packages.sh, none keeps its own.
    for script, arrays in (("scripts/install-deps.sh", ("TRAINLAB_BUILD_PACKAGES", "TRAINLAB_HOST_PACKAGES")),
                           ("scripts/fetch-device-debs.sh",
                            ("TRAINLAB_BUILD_PACKAGES", "TRAINLAB_DEVICE_RUNTIME_PACKAGES"))):
        text = open(f"{root}/{script}").read()
        if "packages.sh" not in text or any(f"${{{a}[@]}}" not in text for a in arrays):
            problems.append(f"{script} does not take its packages from scripts/packages.sh ({', '.join(arrays)})")
    for package in sorted(set(build) | set(host) | set(runtime) | assumed | not_needed):
        if field(package, "Status") is None or "installed" not in field(package, "Status"):
            problems.append(f"{package}: named in scripts/packages.sh but not installed here (a typo, or "
                            f"install-deps.sh did not run)")
    for package in sorted(fetched):
        for dependency in depends(package):
            if dependency in fetched or dependency in assumed or dependency in not_needed:
                continue
            if package.endswith("-dev") and dependency.endswith("-dev"):
                continue
            problems.append(f"{package} depends on {dependency}, which fetch-device-debs.sh does not fetch "
                            f"(add it to TRAINLAB_DEVICE_RUNTIME_PACKAGES, or say why not)")
    if problems:
        print("\n".join(problems))
        return 1
    print(f"check_packages: ok ({len(build)} build packages, {len(runtime)} runtime packages fetched for the GPU "
          f"machine, every dependency fetched or declared: {len(assumed)} assumed present, "
          f"{len(not_needed)} not needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
