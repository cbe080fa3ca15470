#!/usr/bin/env bash
# The GPU tests: the cross-backend harness (every op against the reference, forward and every
# gradient, f32 near 1e-5 with TF32 off, bf16 near 1e-2, both layouts) and the steady-state
# allocation check, run on the cuda backend; then graph replay against eager (cuda_graph) and
# pinned batches against pageable ones, and the f16 loss scaler. Where there is no cuda backend in
# the build, or no GPU on the machine, the test is reported as skipped (exit 77) with the reason, never as passed.
set -u
trainlab=$1
tests=$2
if [ ! -x "$trainlab" ] || [ ! -x "$tests" ]; then
  echo "SKIPPED: $trainlab or $tests is not built (make build-cuda builds them where nvidia-smi lists a GPU)"
  exit 77
fi
if ! "$trainlab" backends | grep -q '^cuda '; then
  echo "SKIPPED: this build has no cuda backend (configure with --preset cuda on a machine with the CUDA toolkit)"
  exit 77
fi
probe=$("$trainlab" gemm --backend cuda --size 64 --seconds 0.05 2>&1)
status=$?
if [ $status -ne 0 ]; then
  # Only a machine without a GPU is a skip; a backend that fails on a GPU is a failure.
  if echo "$probe" | grep -q "no usable GPU"; then
    echo "SKIPPED: $(echo "$probe" | head -n 1)"
    exit 77
  fi
  echo "FAIL: the cuda backend failed its probe (exit $status): $probe"
  exit 1
fi
echo "cuda backend: $probe"
TRAINLAB_HARNESS_BACKENDS=cuda "$tests" "[backends]" || exit 1
# CUDA graphs: the captured and replayed training step against the eager one; then the f16 loss
# scaler on cuda (its fused unscale + inf/NaN check: overflow, skip, back-off, f16 training).
TRAINLAB_DEVICE_TEST_BACKEND=cuda "$tests" "[graph]" || exit 1
TRAINLAB_DEVICE_TEST_BACKEND=cuda exec "$tests" "[scaler]"
