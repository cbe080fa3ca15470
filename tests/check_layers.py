#!/usr/bin/env python3
"""The layers point down: a file may include headers from its own layer and the layers below it.

    kernels/  <  backends/  <  engine/  <  comm/  <  bench/ (and the executables in bench/tools/)  <  studies/

The vocabulary every layer shares, backends/dtype.h (DType, bf16, f16) and backends/error.h (Error,
TL_CHECK), may be included from anywhere, kernels/ included. Third-party headers stay where they belong: CUDA only in kernels/, backends/cuda/ and the NCCL
communicator; MPI only in comm/; oneDNN only in backends/onednn/; Eigen only in backends/eigen/.
Prints every violation (file, line, the include and why) and exits 1 when there is one.

    tests/check_layers.py [ROOT]
"""
import pathlib
import re
import sys

LAYERS = ["kernels", "backends", "engine", "comm", "bench", "studies"]
RANK = {name: i for i, name in enumerate(LAYERS)}
SHARED = {"backends/dtype.h", "backends/error.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')

# third-party header prefix -> the paths (prefixes) allowed to include it
THIRD_PARTY = [
    (("cuda", "cublas", "cudnn", "nccl", "curand", "cuda_runtime"), ("kernels/", "backends/cuda/", "comm/nccl_communicator")),
    (("mpi.h",), ("comm/",)),
    (("dnnl", "oneapi/dnnl"), ("backends/onednn/",)),
    (("Eigen/", "unsupported/Eigen"), ("backends/eigen/",)),
]


def layer_of(path):
    top = path.parts[0]
    return top if top in RANK else None


def check(root):
    problems = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".hpp", ".cpp", ".cu", ".cuh") or not path.is_file():
            continue
        rel = path.relative_to(root)
        layer = layer_of(rel)
        if layer is None or "build" in rel.parts[0]:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(2)
            head = target.split("/")[0]
            if m.group(1) == '"' and head in RANK and RANK[head] > RANK[layer] and target not in SHARED:
                problems.append(f'{rel}:{number}: includes "{target}": {head}/ is above {layer}/ '
                                f'(a layer may include only its own and the ones below: {" < ".join(LAYERS)})')
            for prefixes, allowed in THIRD_PARTY:
                if target.startswith(prefixes) and not str(rel).startswith(allowed):
                    problems.append(f"{rel}:{number}: includes <{target}>, which only {', '.join(allowed)} may include")
    return problems


def main():
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
