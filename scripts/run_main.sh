#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: install packages, build, then train the example GPT with
# 2 data-parallel ranks with ZeRO stage 2 through the deepspeed launcher on the embedded default corpus (about a minute).
# Extra arguments go to train_gpt (e.g. --steps 500 --deepspeed_config my.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build_dir=${DS_BUILD_DIR:-build}
exec "$build_dir/bin/deepspeed" --num_procs 2 "$build_dir/bin/train_gpt" \
  --deepspeed_config examples/configs/gpt_zero2.json --steps 250 "$@"
