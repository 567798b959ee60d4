#!/usr/bin/env bash
# The whole test suite from a fresh Debian 12 machine: install packages, build, run every test (unit and dist).
# Exits non-zero when any test fails. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir=${DS_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" "$@"
