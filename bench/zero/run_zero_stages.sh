#!/usr/bin/env bash
# One run of the ZeRO stages benchmark: stages 0/1/2/3 x fp32/bf16 (stage 3 also with prefetch off) on 2 ranks,
# each configuration in a fresh pair of processes (so no allocator cache from one configuration flatters the
# next), then one side-by-side table.
#
#   [ROUNDS=3] [MEM_STEPS=4] [TIME_ROUNDS=1] bench/zero/run_zero_stages.sh [BIN_DIR] [bench_zero_stages flags]
#
# BIN_DIR (default build/bin) holds `deepspeed` and `bench_zero_stages`. Two parts, one table:
#   memory: each configuration in its own pair of processes, ROUNDS times (default 3), the rounds interleaved
#           (every configuration once, then again), with MEM_STEPS timed steps after the warm-up (memory is the
#           same every step; a flag --steps after BIN_DIR overrides it). The table gives the median over rounds
#           and the largest beside it, in three measures per rank, each minus its value before the model is
#           built: peak RSS (VmHWM), peak in-use heap (glibc mallinfo2 uordblks + hblkhd over all arenas,
#           sampled after forward, backward and step) and peak live LibTorch tensor bytes (a counting CPU
#           allocator). RSS moves by tens of MiB run to run (glibc keeps free pages in per-thread arenas of
#           the Gloo and autograd threads, however many of those it made); the other two do not, so the
#           stage 2 verdict rests on them.
#   time:   one pair of processes with all ten engines, timed in alternating blocks (--interleave), so the drift
#           of this shared machine hits every configuration alike and the ratios vs stage 0 are read off the same
#           minutes; TIME_ROUNDS such runs (median of their medians). The memory runs' times are not used when
#           interleaved ones exist. After the timed steps, a short comms-logger window (--comm_steps) per stage
#           2/3 engine measures the bytes each rank sends per step (the logger is off while timing).
#
# The stage 2 verdict: stage 2's working set (in-use heap, and tensor bytes) <= the estimator's model states +
# an allowance. The allowance is measured in the same run, not picked: stage 0's working set minus stage 0's
# estimate, i.e. what the same model, batch and comm layer hold beyond the formula's model states (activations
# of micro 8 x seq 128 saved for backward and their gradients, Gloo and comm staging buffers, what LibTorch,
# OpenBLAS and Gloo allocate on the first step), plus the one transient stage 2 has and stage 0 has not that
# the formula leaves out: the chunked parameter all-gather after the step ((2 + 1/N) x allgather_bucket_size
# elements of the model dtype: the gathered chunk, the clone sent, Gloo's flat staging). Equivalently, stage 2
# passes when the measured saving over stage 0 is at least the estimator's saving less those transients; the
# table prints that saving as a ratio of the estimator's.
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
ROUNDS=${ROUNDS:-3}
MEM_STEPS=${MEM_STEPS:-4}
TIME_ROUNDS=${TIME_ROUNDS:-1}
ROWS=$(mktemp "${TMPDIR:-/tmp}/zero_stages.XXXXXX.tsv")
trap 'rm -f "$ROWS"' EXIT
echo "zero stages benchmark: $NPROC ranks, $(nproc) cores, $ROUNDS memory round(s), $TIME_ROUNDS time round(s);" \
  "start: $(uptime)"
for ((round = 1; round <= ROUNDS; ++round)); do
  for cfg in 0,fp32 3,bf16 2,bf16 3,fp32,noprefetch 1,fp32 0,bf16 3,fp32 2,fp32 3,bf16,noprefetch 1,bf16; do
    "$BIN/deepspeed" --num_procs "$NPROC" --master_port "$PORT" "$BIN/bench_zero_stages" --only "$cfg" \
      --rows "$ROWS" --steps "$MEM_STEPS" "$@" | grep -v '^\[rank[1-9]'
  done
done
for ((round = 1; round <= TIME_ROUNDS; ++round)); do
  "$BIN/deepspeed" --num_procs "$NPROC" --master_port "$PORT" "$BIN/bench_zero_stages" --interleave \
    --rows "$ROWS" "$@" | grep -v '^\[rank[1-9]'
done
echo "end: $(uptime)"
"$BIN/bench_zero_stages" --report "$ROWS" "$@"
