"""The PyTorch peers' memory allocator setting, applied before torch is imported.

PyTorch's CPU allocator hands every tensor to malloc. With glibc's defaults, large blocks are
mmapped and returned to the kernel when freed, so each training step pays fresh page faults and
zeroing for its activations and gradients; whether a process falls into that mode depends on
glibc's dynamic mmap threshold, so the same PyTorch step measured 45 ms in one process and 170 ms
in the next on this machine (SmallCNN, batch 128, 2 threads). PyTorch's CPU performance guides
answer this with jemalloc or tcmalloc; glibc's own tunables do the same here: no mmap for large
blocks and no trimming, so freed memory is reused. The peers run that way by default (the
strongest PyTorch a user would run); --malloc system measures glibc's defaults instead.
"""
import os
import sys

TUNABLES = "glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295"


def malloc_choice(argv):
    for i, arg in enumerate(argv):
        if arg == "--malloc" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--malloc="):
            return arg.split("=", 1)[1]
    return "tuned"


def ensure(argv=None):
    """Re-executes this script with the tunables set unless --malloc system is given or they are
    already set; returns what the process runs with (recorded in every result line)."""
    argv = sys.argv if argv is None else argv
    if malloc_choice(argv) == "system":
        return "system (glibc defaults)"
    current = os.environ.get("GLIBC_TUNABLES", "")
    if TUNABLES not in current:
        env = dict(os.environ)
        env["GLIBC_TUNABLES"] = ":".join(x for x in (current, TUNABLES) if x)
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable] + argv, env)
    return "tuned (GLIBC_TUNABLES " + TUNABLES + ")"
