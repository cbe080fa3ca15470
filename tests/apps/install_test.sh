#!/usr/bin/env bash
# The library as a user gets it: installs the built tree into a temporary prefix, then configures,
# builds and runs each example driver (examples/*) against it on its own, exactly as a user's own
# driver would be built (find_package(trainlab)), with short runs.
set -euo pipefail
build_dir=$1
source_dir=$2
generator=${3:-Ninja}
work=$(mktemp -d "${TMPDIR:-/tmp}/trainlab-install-XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/trainlab/trainlabConfig.cmake"
test -f "$work/prefix/include/trainlab/engine/train/trainer.h"
test -f "$work/prefix/include/trainlab/models/smallcnn/smallcnn.h"
test ! -e "$work/prefix/include/trainlab/engine/io/yaml_file.h"
test ! -e "$work/prefix/include/trainlab/backends/onednn/onednn_backend.h"  # a backend's internals (oneDNN) stay out
for driver in own_model_and_data gradient_timeline; do
  cmake -S "$source_dir/examples/$driver" -B "$work/$driver" -G "$generator" \
        -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/$driver-configure.log"
  cmake --build "$work/$driver" > "$work/$driver-build.log"
done
"$work/own_model_and_data/own_model_and_data" --target 0.9 --steps 1500
"$work/gradient_timeline/gradient_timeline" --steps 8 --batch 16
echo "both drivers built against the installed package and ran"
