#!/usr/bin/env python3
"""scripts/device_check_summary.py on what a device check leaves: nothing at all (a check cut short
before its first stage), and a run's pieces (stages, the GPU tests' verdict, trainlab's and
PyTorch's throughput lines, a failed torch variant). The summary never fails, names what is
missing, and takes PyTorch's best variant by median.

    tests/check_device_summary.py SOURCE_DIR
"""
import json
import os
import subprocess
import sys
import tempfile


def summary(script, work):
    result = subprocess.run([sys.executable, script, work], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"FAIL: the summary exited {result.returncode}: {result.stderr}")
    return result.stdout


def main():
    script = os.path.join(sys.argv[1], "scripts", "device_check_summary.py")
    problems = []
    with tempfile.TemporaryDirectory() as work:
        empty = summary(script, work)
        if "# trainlab device check" not in empty or "(nvidia-smi gave nothing)" not in empty:
            problems.append("an empty work folder does not give the summary's frame")
        with open(os.path.join(work, "stages.txt"), "w") as f:
            f.write("device-check: build: exit 0 after 61 s\n")
        with open(os.path.join(work, "gpu-tests.log"), "w") as f:
            f.write("1/3 Test #1: gpu.cuda-kernels ...   Passed 3.1 sec\n100% tests passed, 0 tests failed out of 3\n")
        with open(os.path.join(work, "trainlab_f32.jsonl"), "w") as f:
            f.write(json.dumps({"samples_per_s": 50000.0}) + "\n")
        with open(os.path.join(work, "torch_f32.jsonl"), "w") as f:
            f.write(json.dumps({"variants": {"eager": {"samples_per_s": 40000.0},
                                             "channels_last": {"samples_per_s": 45000.0},
                                             "broken": {"error": "CUDA out of memory"}}}) + "\n")
        text = summary(script, work)
        for needed in ("build: exit 0 after 61 s", "100% tests passed", "| f32 | 50000.0 | 45000.0 (channels_last) | 1.11x |",
                       "| bf16 (target >= 1.0x) | missing | missing | n/a |"):
            if needed not in text:
                problems.append(f"the summary lacks {needed!r}")
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    print("check_device_summary: ok (an empty run and a partial one summarised; the best PyTorch variant by median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
