#!/usr/bin/env bash
# Installs the built tree into a temporary prefix, then configures, builds and runs
# studies/example_driver against it exactly as a user's own driver would.
set -euo pipefail
build_dir=$1
source_dir=$2
generator=${3:-Ninja}
work=$(mktemp -d "${TMPDIR:-/tmp}/trainlab-install-XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/trainlab/trainlabConfig.cmake"
test -f "$work/prefix/include/trainlab/engine/trainer.h"
cmake -S "$source_dir/studies/example_driver" -B "$work/build" -G "$generator" \
      -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
"$work/build/example_driver" --steps 4
