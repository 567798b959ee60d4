#!/usr/bin/env bash
# Pipeline bubble vs theory for p = 2 and 4 stages, m = 1, 4, 8 micro-batches (see pipeline_bubble_bench.cc).
# Usage: bench/pipe/run_pipeline_bubble.sh [build-dir]
set -euo pipefail
build=${1:-build}
for p in 2 4; do
  "$build/bin/deepspeed" --num_procs "$p" "$build/bin/bench_pipeline_bubble" | sed -n 's/^\[rank0\]: //p' | \
    grep -E '^(p |[0-9])' | { if [ "$p" = 2 ]; then cat; else grep -v '^p '; fi; }
done
