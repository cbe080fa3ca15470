"""The PyTorch peers' memory allocator, applied before torch is imported (the process re-executes
itself with the environment the choice needs).

PyTorch's CPU allocator hands every tensor to malloc. With glibc's defaults, large blocks are
mmapped and returned to the kernel when freed, so each training step pays fresh page faults and
zeroing for its activations and gradients; whether a process falls into that mode depends on
glibc's dynamic mmap threshold, so the same PyTorch step measured 45 ms in one process and 170 ms
in the next on this machine (SmallCNN, batch 128, 2 threads). PyTorch's CPU performance guides
answer this with jemalloc or tcmalloc. The choices (--malloc), each measured, none assumed best:
  tuned     (default) glibc with its tunables set: no mmap for large blocks, no trimming
  system    glibc's defaults
  tcmalloc  gperftools' tcmalloc (LD_PRELOAD=libtcmalloc.so.4, Debian's libgoogle-perftools4)
  jemalloc  jemalloc (LD_PRELOAD=libjemalloc.so.2, Debian's libjemalloc2) with the MALLOC_CONF
            PyTorch's performance tuning guide gives
A variant name may carry its allocator: "channels_last@tcmalloc" (split_variant).
An allocator whose library is missing is a one-line error (JSON, exit 3): the comparisons record
the variant as not run on this machine, never fatal.
"""
import json
import os
import sys

TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PRELOAD = {"tcmalloc": os.path.join(LIBDIR, "libtcmalloc.so.4"), "jemalloc": os.path.join(LIBDIR, "libjemalloc.so.2")}
# PyTorch's performance tuning guide (CPU, "Switch Memory allocator").
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:9000000000," \
                "muzzy_decay_ms:9000000000"
CHOICES = ("tuned", "system", "tcmalloc", "jemalloc")


def split_variant(name):
    """A variant name "FEATURES@ALLOCATOR" as (FEATURES, ALLOCATOR or None): the comparisons measure
    an allocator as a variant of its own, run in a process of its own."""
    variant, _, malloc = name.partition("@")
    return variant, (malloc or None)


def malloc_choice(argv):
    """The allocator: a --variant's @ALLOCATOR, else --malloc, else tuned."""
    chosen = "tuned"
    for i, arg in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if arg.startswith("--malloc="):
            chosen = arg.split("=", 1)[1]
        elif arg == "--malloc" and value:
            chosen = value
    for i, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--variant=") else argv[i + 1] if arg == "--variant" and \
            i + 1 < len(argv) else None
        if value and split_variant(value)[1]:
            return split_variant(value)[1]
    return chosen


def _environment(choice):
    """The variables `choice` needs, or None for an unknown choice or a missing library (said on stdout)."""
    if choice == "system":
        return {}
    if choice == "tuned":
        current = os.environ.get("GLIBC_TUNABLES", "")
        return {"GLIBC_TUNABLES": current if TUNABLES in current else ":".join(x for x in (current, TUNABLES) if x)}
    if choice in PRELOAD:
        if not os.path.exists(PRELOAD[choice]):
            print(json.dumps({"tool": os.path.basename(sys.argv[0]), "error":
                              f"--malloc {choice}: {PRELOAD[choice]} is not installed (scripts/install-deps.sh "
                              f"installs it)"}))
            sys.exit(3)
        env = {"LD_PRELOAD": PRELOAD[choice]}
        if choice == "jemalloc":
            env["MALLOC_CONF"] = JEMALLOC_CONF
        return env
    return None  # argparse names the choices


def describe(choice):
    return {"tuned": "tuned (GLIBC_TUNABLES " + TUNABLES + ")", "system": "system (glibc defaults)",
            "tcmalloc": "tcmalloc (LD_PRELOAD " + PRELOAD["tcmalloc"] + ")",
            "jemalloc": "jemalloc (LD_PRELOAD " + PRELOAD["jemalloc"] + ", MALLOC_CONF " + JEMALLOC_CONF + ")"}.get(
                choice, choice)


def ensure(argv=None):
    """Re-executes this script with the environment of its --malloc choice unless it is set already;
    returns what the process runs with (recorded in every result line)."""
    argv = sys.argv if argv is None else argv
    choice = malloc_choice(argv)
    wanted = _environment(choice)
    if wanted is None:
        print(json.dumps({"tool": os.path.basename(sys.argv[0]),
                          "error": f"allocator {choice!r} is not one of {list(CHOICES)}"}))
        sys.exit(2)
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        env = dict(os.environ)
        env.update(wanted)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + argv, env)
    return describe(choice)
