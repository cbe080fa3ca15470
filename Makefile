# The README's two set-up commands are `make ladder` and `make test`. Each installs what is
# missing (scripts/install-deps.sh, Debian packages), configures and builds, then runs.
# CI sets CI=true, which builds with warnings as errors (the `ci` preset, same build/ folder).

IN_CI := $(filter true 1 yes,$(CI))
PRESET := $(if $(IN_CI),ci,release)
TEST_PRESET = $(PRESET)
BUILD_DIR := build
# CPU=avx2: every target as an AVX2 machine without AVX-512 runs it, on this machine: the portable
# build (build-portable/, -march=x86-64-v3) with ONEDNN_MAX_CPU_ISA=AVX2, which caps oneDNN and
# trainlab's own loops (backends/cpu/isa.h); measurements go to results/avx2/ unless LEDGER= says.
# `make test CPU=avx2` checks the golden weights against the avx2 digests; `make ladder CPU=avx2`
# measures amp_bf16 emulated (seed 000's negative result).
CPU ?=
ifeq ($(CPU),avx2)
PRESET := portable
TEST_PRESET := portable-avx2
BUILD_DIR := build-portable
export ONEDNN_MAX_CPU_ISA := AVX2
# The PyTorch peers capped alike: their oneDNN by the line above, ATen's own kernels by this one,
# OpenBLAS (their nn.Linear's BLAS) by its Haswell kernels (AVX2) instead of those it picks here.
export ATEN_CPU_CAPABILITY := avx2
export OPENBLAS_CORETYPE := Haswell
LEDGER ?= results/avx2/ledger_cpu.jsonl
# docs/RESULTS.md's comparison blocks of this run are the _avx2 ones (the native run's stay).
AVX2_BLOCKS := _avx2
else ifneq ($(CPU),)
$(error CPU=$(CPU): the only emulated CPU is avx2 (CPU=avx2), or leave it unset for this machine's own)
endif
TRAINLAB := $(BUILD_DIR)/bin/trainlab

.PHONY: all deps configure build install test test-sanitize build-cuda ladder ladder-full report verify compare headline accuracy pinning memory parallelism dataset-study fashion resnet gpt fashion-data allreduce-variants allreduce-two-level clean format check-format fuzz

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) > /dev/null

build: configure
	@cmake --build --preset $(PRESET)

# Every test, through ctest.
test: build
	@ctest --preset $(TEST_PRESET)

# The same suite under AddressSanitizer and UndefinedBehaviorSanitizer (build-sanitize/), less the
# tests the sanitize test preset leaves out (CMakePresets.json: slow, long, golden, package, peer,
# docs, seed-study); it builds only what the rest run (not bench_ladder or the seeds' study drivers).
# It is also the suite as an AVX2 machine runs it: built for x86-64-v3 and run with
# ONEDNN_MAX_CPU_ISA=AVX2 (bf16 emulated, checked against PyTorch by peer.gradients-match-pytorch).
# Built with clang-14: its instrumented compile takes half GCC's time (18 s against 34-42 s for
# studies/ladder/ladder.cpp, -O1 with ASan and UBSan), and the code then builds warning-free under
# both compilers; install-deps --sanitize adds clang, its sanitizer runtimes and its OpenMP.
SANITIZE_TARGETS = trainlab_tests trainlab_comm_tests trainlab_cli bench_allreduce bench_buckets bench_report \
                    bench_pipeline bench_tensor_parallel bench_parallelism \
                    bench_scaling own_model_and_data gradient_timeline reference_row_check $(addprefix fuzz_,$(FUZZ_TARGETS))
test-sanitize:
	@bash scripts/install-deps.sh --sanitize
	@cmake --preset sanitize > /dev/null
	@cmake --build --preset sanitize --target $(SANITIZE_TARGETS)
	@ctest --preset sanitize

# The CUDA build (build-cuda/, sm_90 + PTX), then the GPU tests, which report themselves skipped
# (with the reason) on a machine without a GPU. Where there is a GPU (nvidia-smi lists one): the
# library with the cuda backend and its kernels, the NCCL communicator, the trainlab command, the
# test suites, bench_allreduce, bench_scaling and cost_to_accuracy (configs/cost_cuda.yaml). Where
# there is none, only the library (the cuda backend, the kernels), the communicators (NCCL) and the
# kernel test: the rest is host code the other builds compile, and nothing here could run it. Skipped, saying so, when there is no CUDA toolkit.
NVCC ?= /usr/local/cuda/bin/nvcc
# CI without a GPU (CI=true) only checks that it compiles and links: a unity build with host code
# at -O1 (preset cuda-ci, build-cuda-ci/: CI time). Everywhere else, and wherever there is a GPU,
# the file-by-file -O3 build the GPU figures are measured with (preset cuda, build-cuda/).
CUDA_TARGETS := trainlab trainlab_comm trainlab_cuda_kernels_test
CUDA_GPU_TARGETS := $(CUDA_TARGETS) trainlab_comm_tests trainlab_cli trainlab_tests bench_allreduce bench_scaling \
                    cost_to_accuracy
build-cuda: deps
	@if [ ! -x "$(NVCC)" ]; then echo "build-cuda: skipped: no CUDA toolkit ($(NVCC) not found)"; exit 0; fi; \
	targets="$(CUDA_GPU_TARGETS)"; preset=cuda; \
	if ! nvidia-smi -L > /dev/null 2>&1; then \
	  targets="$(CUDA_TARGETS)"; preset=$(if $(IN_CI),cuda-ci,cuda); \
	  echo "build-cuda: no GPU here: building the targets with CUDA or NCCL code only ($$targets; preset $$preset)"; \
	fi; \
	cmake --preset $$preset > /dev/null && \
	cmake --build --preset $$preset --target $$targets && \
	ctest --preset $$preset -L gpu

# Every parser under libFuzzer (clang-14, coverage-guided, with AddressSanitizer and
# UndefinedBehaviorSanitizer; build-fuzz/): each target runs FUZZ_SECONDS from its seed corpus
# (tests/fuzz/corpus/<target>, copied: new inputs go to build-fuzz/corpus/<target>) with its
# dictionary, and the run fails on the first crash, leak or hang (an input over 10 s), leaving the
# input as build-fuzz/crash-* (replay it: build-fuzz/bin/fuzz_<target> FILE). `make test` and
# `make test-sanitize` run the same targets briefly with a deterministic driver (ctest -L fuzz).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors checkpoint config ledger cli dataset diagnose import tuning
fuzz:
	@bash scripts/install-deps.sh --sanitize
	@cmake --preset fuzz > /dev/null
	@cmake --build --preset fuzz --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  case $$t in config) d=yaml;; cli) d=cli;; import) d=import;; *) d=json;; esac; \
	  mkdir -p build-fuzz/corpus/$$t && cp -n tests/fuzz/corpus/$$t/* build-fuzz/corpus/$$t/ 2>/dev/null; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  (cd build-fuzz && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan_mpi.supp ./bin/fuzz_$$t corpus/$$t \
	     -dict=$(CURDIR)/tests/fuzz/$$d.dict -max_total_time=$(FUZZ_SECONDS) -timeout=10 -max_len=65536 \
	     -print_final_stats=1 > fuzz-$$t.log 2>&1); status=$$?; tail -n 12 build-fuzz/fuzz-$$t.log; \
	  [ $$status -eq 0 ] || { echo "fuzz: $$t failed (exit $$status); the input is in build-fuzz/"; exit 1; }; \
	done; echo "fuzz: every target ran $(FUZZ_SECONDS) s with no crash, leak or hang"

# The main job: the quick CPU optimisation ladder (configs/ladder_cpu.yaml) with calibration
# arms, interleaved repeats, rows appended to results/ledger_cpu.jsonl and results/REPORT.md
# regenerated from it. `make ladder-full` runs the full ladder (more steps and repeats).
# LEDGER= names another ledger for every measuring target below (its REPORT.md beside it): the
# committed evidence of one machine is bench/results/<machine>/ledger_cpu.jsonl.
LEDGER ?= results/ledger_cpu.jsonl
REPORT := $(dir $(LEDGER))REPORT.md
LADDER := $(BUILD_DIR)/bin/bench_ladder

# Real data (issue 26). DATA=fashion is Fashion-MNIST from Debian's dataset-fashion-mnist
# (install-deps installs it), imported once under $(BUILD_DIR): raw pixels for the training studies,
# PNG shards for the ladder (whose data wait is then the real decode). DATA=DIR is any data set
# trainlab make-dataset wrote.
DATA ?=
FASHION_IDX := /usr/share/datasets/fashion-mnist
FASHION_RAW := $(BUILD_DIR)/fashion-mnist
FASHION_PNG := $(BUILD_DIR)/fashion-mnist-png
fashion-data: build
	@[ -f $(FASHION_RAW)/manifest.json ] || $(BUILD_DIR)/bin/trainlab make-dataset --from idx:$(FASHION_IDX) --out $(FASHION_RAW) --codec raw
	@[ -f $(FASHION_PNG)/manifest.json ] || $(BUILD_DIR)/bin/trainlab make-dataset --from idx:$(FASHION_IDX) --out $(FASHION_PNG) --codec png
LADDER_DATA := $(if $(filter fashion,$(DATA)),$(FASHION_PNG),$(DATA))

# `make ladder DATA=fashion` (or DATA=DIR): the same ladder with every sample read from the data set.
ladder: build $(if $(filter fashion,$(DATA)),fashion-data)
	@$(LADDER) --device cpu --quick --calibrate --repeats 5 --ledger $(LEDGER) --report $(REPORT) $(if $(LADDER_DATA),--data $(LADDER_DATA))

ladder-full: build $(if $(filter fashion,$(DATA)),fashion-data)
	@$(LADDER) --device cpu --calibrate --repeats 7 --ledger $(LEDGER) --report $(REPORT) $(if $(LADDER_DATA),--data $(LADDER_DATA))

# trainlab against PyTorch (bench/compare_torch.py): every trainlab configuration and every PyTorch
# variant the peer defines, interleaved over 5 rounds; the best PyTorch variant per dtype in the run
# is the peer. Appends the run to $(LEDGER), regenerates $(REPORT) (its figure of the ratios per
# round) and, from the ledger, docs/RESULTS.md's three comparison blocks (bench_report is their one
# writer). `make compare CPU=avx2` is the capped arm: the portable build under ONEDNN_MAX_CPU_ISA=AVX2
# against PyTorch capped alike, its targets issue 28's AVX2 row, its blocks the _avx2 ones.
# COMPARE_ROUNDS: the interleaved rounds (5).
COMPARE_ROUNDS ?= 5
compare: build
	@python3 bench/compare_torch.py --trainlab $(TRAINLAB) --ledger $(LEDGER) --out $(dir $(LEDGER))compare_torch.json \
	  --rounds $(COMPARE_ROUNDS)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) --readme docs/RESULTS.md \
	  --blocks torch_ratios$(AVX2_BLOCKS),compare_torch$(AVX2_BLOCKS),compare_torch_headline$(AVX2_BLOCKS) > /dev/null \
	  && echo "report: $(REPORT)"

# Every figure of the README's headline table measured again in one run (bench/headline.py): the
# comparisons with PyTorch (SmallCNN and ResNet-20, every variant), the ladder, Fashion-MNIST
# (SmallCNN; ResNet-20 in a short form, said), DDP scaling; 3 rounds each, about 50 minutes here.
# Then README.md's headline block (headline_avx2 under CPU=avx2) and docs/RESULTS.md's blocks are
# rewritten from $(LEDGER), quoting that run only. ONLY=compare,ladder runs just those steps.
ONLY ?=
headline: build
	@python3 bench/headline.py --build $(BUILD_DIR) --ledger $(LEDGER) $(if $(ONLY),--only $(ONLY))

# Re-runs a sample of the latest ladder run's rungs in $(LEDGER) and says whether each lands within
# its recorded spread (SAMPLE rungs, default 3); then, where make compare left its JSON beside the
# ledger, the headline configurations against their recorded PyTorch peers (3 rounds).
SAMPLE ?= 3
verify: build
	@$(BUILD_DIR)/bin/bench_report --verify --ledger $(LEDGER) --sample $(SAMPLE)
	@if [ -f $(dir $(LEDGER))compare_torch.json ]; then \
	  python3 bench/compare_torch.py --verify --out $(dir $(LEDGER))compare_torch.json --rounds 3; fi

# The hand-written all-reduce against the strongest MPI, per size (issue 27): every Open MPI
# all-reduce algorithm and its own decision, each under glibc's malloc and a tuned one, a process
# each (bench/allreduce_variants.py), ROUNDS rounds interleaved, at NP ranks; rows in $(LEDGER),
# REPORT.md regenerated (its all-reduce section names the strongest variant of each size).
NP ?= 2
ROUNDS ?= 3
allreduce-variants: build
	@python3 bench/allreduce_variants.py --np $(NP) --rounds $(ROUNDS) --ledger $(LEDGER)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

# The two-level all-reduce (issue 27): 2 "nodes" x 2 ranks on this host, every message over TCP and
# shared memory inside a node, the hierarchical all-reduce against the flat ring and the model's
# prediction from the two links measured in the same run; rows in $(LEDGER), REPORT.md regenerated.
allreduce-two-level: build
	@scripts/mpirun -np 4 --mca btl tcp,self $(BUILD_DIR)/bin/bench_allreduce --node-size 2 --min-iters 15 --ledger $(LEDGER)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

# Seed 000's two studies (studies/), rows appended to results/ledger_cpu.jsonl, then REPORT.md.
# `make accuracy RATE=0.35`: the cost to held-out accuracy of configs/cost_cpu.yaml's configurations
# at RATE $/hour (required: no default price); SCALING_LEDGER=<ledger with a bench_scaling run> adds
# the break-even of scaling out. DATA=fashion runs them on Fashion-MNIST to configs/cost_fashion.yaml's
# target (the report puts both rankings side by side), DATA=fashion MODEL=resnet ResNet-20's
# configurations to configs/cost_resnet.yaml's; DATA=DIR TARGET=0.8 on any data set. `make pinning`: the pinning arms, quiet and under CONTEND busy
# threads (default 2; CONTEND=0 for quiet only).
RATE ?=
TARGET ?=
SCALING_LEDGER ?=
CONTEND ?= 2
ACCURACY_CONFIG := $(if $(filter resnet,$(MODEL)),configs/cost_resnet.yaml,configs/cost_fashion.yaml)
ACCURACY_ARGS := $(if $(filter fashion,$(DATA)),--config $(ACCURACY_CONFIG),$(if $(DATA),--data $(DATA)) $(if $(MODEL),--model $(MODEL))) $(if $(TARGET),--target $(TARGET))
accuracy: build $(if $(filter fashion,$(DATA)),fashion-data)
	@if [ -z "$(RATE)" ]; then echo "make accuracy: RATE is required, the machine's price in \$$/hour (e.g. make accuracy RATE=0.35): there is no default price" >&2; exit 2; fi
	@$(BUILD_DIR)/bin/cost_to_accuracy --rate $(RATE) --ledger $(LEDGER) $(ACCURACY_ARGS) $(if $(SCALING_LEDGER),--scaling-ledger $(SCALING_LEDGER))
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

pinning: build
	@$(BUILD_DIR)/bin/pinning --contend $(CONTEND) --ledger $(LEDGER)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

# The memory study (studies/memory): batch x recompute x ZeRO stage over 2 ranks, memory per rank by
# category and step time, repeats interleaved, the control twice (the noise floor); rows appended to
# results/ledger_cpu.jsonl, then REPORT.md with its table and figure.
memory: build
	@scripts/mpirun -np 2 $(BUILD_DIR)/bin/memory_study --ledger $(LEDGER)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

# The parallelism study (issue 48, studies/parallelism): every door (one process, DDP, ZeRO-1 and 2,
# pipeline, tensor split) at one global batch for each model, round-robin over NP ranks.
PARALLELISM_DOORS ?= one,data,zero1,zero2,zero3,pipeline,tensor
parallelism: build
	@for model in smallcnn resnet gpt; do \
	  scripts/mpirun -np $(NP) $(BUILD_DIR)/bin/bench_parallelism --model $$model --fuse --doors $(PARALLELISM_DOORS) \
	    --steps 10 --ledger $(LEDGER) || exit 1; \
	done
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT) > /dev/null && echo "report: $(REPORT)"

# The data set study (studies/dataset, seed 002's re-export regression): the same images as large raw
# shards, PNG shards and one file per sample (written to build/dataset-study), the loader (cold
# cache) and training measured side by side with a calibration arm; rows appended to
# results/ledger_cpu.jsonl.
dataset-study: build
	@$(BUILD_DIR)/bin/dataset_study --work $(BUILD_DIR)/dataset-study --ledger $(LEDGER)

# The Fashion-MNIST study: SmallCNN trained by trainlab and by PyTorch for each of 3 seeds (3 epochs
# each) on $(FASHION_RAW), the table with the published baselines; rows in the ledger, REPORT.md
# regenerated.
fashion: build
	@$(BUILD_DIR)/bin/fashion_study --source $(FASHION_IDX) --data $(FASHION_RAW) --ledger $(LEDGER)
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT)

# ResNet-20 on Fashion-MNIST (issue 45): trainlab (f32, channels_last, fused) and its PyTorch twin per
# seed, held to 93% test accuracy within 15 minutes of training: 10 epochs of batch 128, SGD lr 0.1,
# momentum 0.9, weight decay 5e-4 off batch norm and biases, cosine with a half-epoch warm-up.
# SEEDS=1 is the quick form (~25 min: both frameworks once); the default 3 seeds take ~75 min.
SEEDS ?= 3
RESNET_EPOCHS ?= 10
resnet: build
	@$(BUILD_DIR)/bin/fashion_study --model resnet --source $(FASHION_IDX) --data $(FASHION_RAW) --ledger $(LEDGER) \
	  --seeds $(SEEDS) --epochs $(RESNET_EPOCHS) --batch 128 --lr 0.1 --momentum 0.9 --weight-decay 5e-4 \
	  --warmup-epochs 0.5 --layout nhwc --fuse --goal 0.93 --budget-minutes 15
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT)

# GPT 4x4x128 at context 64 on fortunes (issue 46): nanoGPT's CPU recipe, 2,000 steps per seed,
# trainlab and the same run replayed in PyTorch (bench/gpt_study.py): held-out loss per seed, tokens/s,
# the loss curves, a sample. SEEDS=1 GPT_STEPS=200 is the quick form (~1 min); the default, 3 seeds of
# 2,000 steps, ~12 min.
GPT_STEPS ?= 2000
gpt: build
	@python3 bench/gpt_study.py --build $(BUILD_DIR) --seeds $(SEEDS) --steps $(GPT_STEPS) \
	  --data $(BUILD_DIR)/fortunes --out $(dir $(LEDGER))gpt_study

# The installed package: the portable build (build-portable/, x86-64-v3, the AVX-512 loops chosen
# at run time), so that it runs on any x86-64 CPU with AVX2, into PREFIX (default /usr/local).
PREFIX ?= /usr/local
install: deps
	@cmake --preset portable > /dev/null
	@cmake --build --preset portable
	@cmake --install build-portable --prefix $(PREFIX)

# REPORT.md and its figure from the ledger alone.
report: build
	@$(BUILD_DIR)/bin/bench_report --ledger $(LEDGER) --out $(REPORT)

format:
	@git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format -i

check-format:
	@git ls-files '*.cpp' '*.h' '*.cu' | xargs clang-format --dry-run --Werror

clean:
	@rm -rf $(BUILD_DIR) build-sanitize build-cuda build-cuda-ci build-fuzz
