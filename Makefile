# The README's two set-up commands are `make ladder` and `make test`. Each installs what is
# missing (scripts/install-deps.sh, Debian packages), configures and builds, then runs.
# CI sets CI=true, which builds with warnings as errors (the `ci` preset, same build/ folder).

PRESET := $(if $(filter true 1 yes,$(CI)),ci,release)
BUILD_DIR := build
TRAINLAB := $(BUILD_DIR)/bin/trainlab

.PHONY: all deps configure build test test-sanitize ladder clean format check-format

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

# The main job. Until the optimisation ladder lands (bench layer issue) this is the training
# demo: SmallCNN on SyntheticImages with configs/smallcnn.yaml, printing progress and the
# held-out accuracy.
ladder: build
	@$(TRAINLAB) train --config configs/smallcnn.yaml

format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format -i

check-format:
	@git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run --Werror

clean:
	@rm -rf $(BUILD_DIR) build-sanitize build-cuda
