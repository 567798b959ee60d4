#!/usr/bin/env bash
# One run of the ZeRO stages benchmark: stages 0/1/2/3 x fp32/bf16 (stage 3 also with prefetch off) on 2 ranks, each configuration in a fresh pair of
# processes (so no allocator cache from one configuration flatters the next), then one side-by-side table.
#
#   [ROUNDS=3] bench/zero/run_zero_stages.sh [BIN_DIR] [bench_zero_stages flags: --steps N --warmup W --bucket E ...]
#
# BIN_DIR (default build/bin) holds `deepspeed` and `bench_zero_stages`. Two parts, one table:
#   memory: each configuration in its own pair of processes, ROUNDS times (default 1; the largest peak is kept);
#   time:   one pair of processes with all ten engines, timed in alternating blocks (--interleave), so the drift of
#           this shared machine hits every configuration alike and the ratios vs stage 0 are read off the same
#           minutes. The per-process times of the memory part are not used when the interleaved ones exist.
#           After the timed steps, a short comms-logger window (--comm_steps) per stage 2/3 engine measures the
#           bytes each rank sends per step (the logger is off while timing).
# The load average is printed before and after. Do not rebuild the binary while this runs.
set -euo pipefail
BIN=build/bin
if [[ $# -gt 0 && $1 != -* ]]; then BIN=$1; shift; fi
for exe in "$BIN/deepspeed" "$BIN/bench_zero_stages"; do
  if [[ ! -x $exe ]]; then
    echo "run_zero_stages.sh: $exe not found or not executable (pass the bin folder first)" >&2
    exit 2
  fi
done
NPROC=${NPROC:-2}
PORT=${MASTER_PORT:-29731}
ROUNDS=${ROUNDS:-1}
ROWS=$(mktemp "${TMPDIR:-/tmp}/zero_stages.XXXXXX.tsv")
trap 'rm -f "$ROWS"' EXIT
echo "zero stages benchmark: $NPROC ranks, $(nproc) cores, $ROUNDS round(s); start: $(uptime)"
for ((round = 1; round <= ROUNDS; ++round)); do
  for cfg in 0,fp32 3,bf16 2,bf16 3,fp32,noprefetch 1,fp32 0,bf16 3,fp32 2,fp32 3,bf16,noprefetch 1,bf16; do
    "$BIN/deepspeed" --num_procs "$NPROC" --master_port "$PORT" "$BIN/bench_zero_stages" --only "$cfg" \
      --rows "$ROWS" "$@" | grep -v '^\[rank[1-9]'
  done
done
"$BIN/deepspeed" --num_procs "$NPROC" --master_port "$PORT" "$BIN/bench_zero_stages" --interleave \
  --rows "$ROWS" "$@" | grep -v '^\[rank[1-9]'
echo "end: $(uptime)"
"$BIN/bench_zero_stages" --report "$ROWS" "$@"
