#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: install packages, build, then train the example GPT with
# 2 data-parallel ranks with ZeRO stage 2 through the deepspeed launcher on the embedded default corpus (about a minute).
# Extra arguments go to train_gpt (e.g. --steps 500 --deepspeed_config my.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Only what the job runs: the launcher and the example (with the library and models they link), not the ~290
# targets of tests and benchmarks that scripts/run_tests.sh builds.
bash scripts/build.sh deepspeed_cli train_gpt
build_dir=${DS_BUILD_DIR:-build}
exec "$build_dir/bin/deepspeed" --num_procs 2 "$build_dir/bin/train_gpt" \
  --deepspeed_config examples/configs/gpt_zero2.json --steps 250 "$@"
