#!/usr/bin/env bash
# This build on a CPU with AVX2 and FMA but no AVX-512 (an AMD Zen 3, as most laptops and many cloud
# machines are), for real: the process runs under qemu-x86_64 -cpu EPYC-Milan, whose cpuid has no
# AVX-512, so oneDNN and trainlab's dispatch see what such a machine shows. A portable build
# (x86-64-v3) trains in bf16 there, emulated, saying so; a -march=native build made on an AVX-512
# machine refuses at load with one line naming the missing feature, never SIGILL.
#
#   tests/apps/avx2_cpu_test.sh TRAINLAB
set -uo pipefail
trainlab=$1
if ! command -v qemu-x86_64 > /dev/null; then
  echo "SKIPPED: no qemu-x86_64 (Debian's qemu-user, which scripts/install-deps.sh installs)"
  exit 77
fi
version=$("$trainlab" version) || { echo "FAIL: trainlab version: $version"; exit 1; }
echo "$version"
qemu=(qemu-x86_64 -cpu EPYC-Milan)
out=$("${qemu[@]}" "$trainlab" train --dtype bf16 --steps 2 --batch 8 --train-samples 32 --eval-samples 8 \
        --eval-batch 8 --warmup 1 2>&1 | grep -v "TCG doesn't support")
status=${PIPESTATUS[0]}
if echo "$version" | grep -q "; build native)" && grep -q -w avx512f /proc/cpuinfo; then
  # Built for this AVX-512 machine: refused at load, in one line.
  if [ "$status" -eq 70 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] &&
     echo "$out" | grep -q "needs the CPU feature avx512"; then
    echo "$out"
    echo "avx2_cpu_test: ok (a -march=native build refuses an AVX2 CPU in one line)"
    exit 0
  fi
  echo "$out"
  echo "FAIL: a -march=native build on an AVX2 CPU exited $status instead of refusing in one line (exit 70)"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "$out"
  echo "FAIL: the build exited $status on an AVX2 CPU"
  exit 1
fi
echo "$out" | grep -E "^(backend:|compute on|emulated:|done:)"
echo "$out" | grep -q "^compute on onednn (ISA avx2): conv2d bf16 emulated" ||
  { echo "FAIL: bf16 on an AVX2 CPU did not say it ran emulated"; exit 1; }
echo "avx2_cpu_test: ok (the build trains in bf16 on an AVX2 CPU, emulated)"
