# The README's two set-up commands are `make ladder` and `make test`. Each installs what is
# missing (scripts/install-deps.sh, Debian packages), configures and builds, then runs.
# CI sets CI=true, which builds with warnings as errors (the `ci` preset, same build/ folder).

PRESET := $(if $(filter true 1 yes,$(CI)),ci,release)
BUILD_DIR := build
TRAINLAB := $(BUILD_DIR)/bin/trainlab

.PHONY: all deps configure build test test-sanitize build-cuda ladder ladder-full report clean format check-format

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) > /dev/null

build: configure
	@cmake --build --preset $(PRESET)

# Every test, through ctest.
test: build
	@ctest --preset $(PRESET)

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize/).
test-sanitize: deps
	@cmake --preset sanitize > /dev/null
	@cmake --build --preset sanitize
	@ctest --preset sanitize

# The CUDA build (build-cuda/, sm_90 + PTX): libtrainlab with the cuda backend and its kernels,
# the NCCL communicator, the trainlab command and bench_allreduce, then the GPU tests, which report
# themselves skipped (with the reason) on a machine without a GPU. Skipped, saying so, when there
# is no CUDA toolkit.
NVCC ?= /usr/local/cuda/bin/nvcc
build-cuda: deps
	@if [ ! -x "$(NVCC)" ]; then echo "build-cuda: skipped: no CUDA toolkit ($(NVCC) not found)"; exit 0; fi; \
	cmake --preset cuda > /dev/null && \
	cmake --build --preset cuda --target trainlab_cli bench_allreduce bench_scaling trainlab_cuda_kernels_test && \
	ctest --preset cuda -L gpu

# The main job: the quick CPU optimisation ladder (configs/ladder_cpu.yaml) with calibration
# arms, interleaved repeats, rows appended to results/ledger_cpu.jsonl and results/REPORT.md
# regenerated from it. `make ladder-full` runs the full ladder (more steps and repeats).
LADDER := $(BUILD_DIR)/bin/bench_ladder
ladder: build
	@$(LADDER) --device cpu --quick --calibrate --repeats 5

ladder-full: build
	@$(LADDER) --device cpu --calibrate --repeats 7

# REPORT.md and its figure from the ledger alone.
report: build
	@$(BUILD_DIR)/bin/bench_report --ledger results/ledger_cpu.jsonl --out results/REPORT.md

format:
	@git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format -i

check-format:
	@git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format --dry-run --Werror

clean:
	@rm -rf $(BUILD_DIR) build-sanitize build-cuda
