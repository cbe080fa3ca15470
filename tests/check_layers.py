#!/usr/bin/env python3
"""The layers point down: a file may include headers from its own layer and the layers below it.

    kernels/  <  backends/  <  engine/  <  models/  <  comm/  <  bench/  <  studies/  <  apps/ (every executable)

examples/ are drivers a user writes against an installed trainlab: they include only the installed
headers (backends/, engine/, models/).

The vocabulary every layer shares, backends/dtype.h (DType, bf16, f16), backends/error.h (Error,
TL_CHECK) and backends/counter_rng.h (dropout's counter-based draw, the same bits on the CPU and in
CUDA kernels), may be included from anywhere, kernels/ included. Third-party headers stay where they belong: CUDA only in kernels/, backends/cuda/ and the NCCL
communicator; MPI only in comm/; oneDNN only in backends/onednn/; Eigen only in backends/eigen/.
Inside engine/, the core (tensor, autograd, autocast, the ops) includes only itself, the event
interface its observers subscribe to (engine/core/observer.h) and the random generator: never memory
accounting, the precision audit, the profiler or anything else that watches or drives it.

Prints every violation (file, line, the include and why) and exits 1 when there is one.

    tests/check_layers.py [ROOT]
    tests/check_layers.py --self-test      plants one violation of each rule in a scratch tree and
                                           fails unless every one is caught (the check can fail)
"""
import pathlib
import re
import sys

LAYERS = ["kernels", "backends", "engine", "models", "comm", "bench", "studies", "apps"]
INSTALLED = {"backends", "engine", "models"}  # what examples/ may include
RANK = {name: i for i, name in enumerate(LAYERS)}
SHARED = {"backends/dtype.h", "backends/error.h", "backends/counter_rng.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# third-party header prefix -> the paths (prefixes) allowed to include it
THIRD_PARTY = [
    (("cuda", "cublas", "cudnn", "nccl", "curand", "cuda_runtime"), ("kernels/", "backends/cuda/", "comm/nccl_communicator")),
    (("mpi.h",), ("comm/",)),
    (("dnnl", "oneapi/dnnl"), ("backends/onednn/",)),
    (("Eigen/", "unsupported/Eigen"), ("backends/eigen/",)),
]


# The engine's rooms and their floors: a room includes its own and lower floors; rooms on one floor
# (nn, optim, data) do not include each other.
ROOMS = {"core": 0, "io": 1, "instrument": 2, "nn": 3, "optim": 3, "data": 3, "train": 4}
ROOM_ORDER = "core < io < instrument < nn | optim | data < train"


def room_problem(rel, target):
    """Why engine file `rel` may not include engine header `target` ("" when it may)."""
    here, there = rel.parts[1], pathlib.PurePosixPath(target).parts[1]
    if there not in ROOMS:
        return f"engine/{there} is not a room of the engine ({', '.join(ROOMS)})"
    if here == there or ROOMS[there] < ROOMS[here]:
        return ""
    if here == "core":
        return ("the engine core (tensor, autograd, autocast, ops) includes only itself; what watches it "
                "subscribes through engine/core/observer.h")
    if ROOMS[there] == ROOMS[here]:
        return f"engine/{here}/ and engine/{there}/ stand side by side: neither includes the other ({ROOM_ORDER})"
    return f"engine/{there}/ is above engine/{here}/ ({ROOM_ORDER})"


def layer_of(path):
    top = path.parts[0]
    return top if top in RANK or top == "examples" else None


def check(root):
    problems = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".hpp", ".cpp", ".cu", ".cuh") or not path.is_file():
            continue
        rel = path.relative_to(root)
        layer = layer_of(rel)
        if layer is None or "build" in rel.parts[0]:
            continue
        if layer == "engine" and (len(rel.parts) < 3 or rel.parts[1] not in ROOMS):
            problems.append(f"{rel}: every engine file lives in one of its rooms ({', '.join(ROOMS)}), "
                            f"not at engine/ itself or in another folder")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(2)
            head = target.split("/")[0]
            if layer == "examples":
                if m.group(1) == '"' and head in RANK and head not in INSTALLED and target not in SHARED:
                    problems.append(f'{rel}:{number}: includes "{target}": an example includes only the installed '
                                    f'headers ({", ".join(sorted(INSTALLED))}/), as a user\'s own driver would')
            elif m.group(1) == '"' and head in RANK and RANK[head] > RANK[layer] and target not in SHARED:
                problems.append(f'{rel}:{number}: includes "{target}": {head}/ is above {layer}/ '
                                f'(a layer may include only its own and the ones below: {" < ".join(LAYERS)})')
            if m.group(1) == '"' and layer == "engine" and target.startswith("engine/") and len(rel.parts) > 2:
                why = room_problem(rel, target)
                if why:
                    problems.append(f'{rel}:{number}: includes "{target}": {why}')
            for prefixes, allowed in THIRD_PARTY:
                if target.startswith(prefixes) and not str(rel).startswith(allowed):
                    problems.append(f"{rel}:{number}: includes <{target}>, which only {', '.join(allowed)} may include")
    return problems


PLANTED = {
    # the engine's core including what watches it
    "engine/core/autograd.cpp": '#include "engine/instrument/profiler.h"\n',
    # a room including one above it
    "engine/io/fileio.cpp": '#include "engine/train/step.h"\n',
    # two rooms of one floor including each other
    "engine/nn/module.cpp": '#include "engine/data/loader.h"\n',
    # an engine file outside the rooms
    "engine/stray.cpp": "int stray;\n",
    # the engine including a model (models/ is above it)
    "engine/train/task.cpp": '#include "models/smallcnn/smallcnn.h"\n',
    # a layer including one above it
    "bench/measure/ledger.cpp": '#include "studies/ladder/ladder.h"\n',
    # an example including more than the installed headers
    "examples/own/main.cpp": '#include "bench/measure/ledger.h"\n',
    # a third-party header outside its folder
    "engine/core/tensor.cpp": "#include <mpi.h>\n",
}


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch)
        for rel, text in PLANTED.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        problems = check(root)
    missed = [rel for rel in PLANTED if not any(p.startswith(rel + ":") for p in problems)]
    for p in problems:
        print("caught: " + p)
    if missed or len(problems) != len(PLANTED):
        print(f"self-test FAILED: {len(problems)} problems for {len(PLANTED)} planted; missed: {missed}")
        return 1
    print(f"self-test: all {len(PLANTED)} planted includes caught")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) point the wrong way")
        return 1
    print("every include points down (" + " < ".join(LAYERS) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
