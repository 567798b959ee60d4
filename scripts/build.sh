#!/usr/bin/env bash
# Configures and builds deepspeed-cpp into build/ (every executable lands in build/bin/). Incremental and ccache'd.
# With arguments, builds only those targets (and what they need): `bash scripts/build.sh deepspeed_cli train_gpt`.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${DS_BUILD_DIR:-build}
jobs=${DS_BUILD_JOBS:-$(nproc)}
# CI (CI=true) builds with warnings as errors, so a new warning fails the run instead of scrolling past.
werror=OFF
if [ "${CI:-}" = true ]; then werror=ON; fi
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS_WERROR=$werror
fi
if [ $# -gt 0 ]; then
  cmake --build "$build_dir" -j "$jobs" --target "$@"
else
  cmake --build "$build_dir" -j "$jobs"
fi
