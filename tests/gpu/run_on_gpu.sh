#!/usr/bin/env bash
# Runs a GPU check's command when a GPU is visible; otherwise exits 77, which CTest reports as skipped.
set -u
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then
  echo "no GPU visible (nvidia-smi -L): skipped"
  exit 77
fi
# A test that finds no GPU through LibTorch fails rather than skips from here on (tests/ops/tensor_op_steps_test.cc).
export DS_REQUIRE_GPU=1
exec "$@"
