#!/usr/bin/env bash
# The longest sequence that trains under a per-rank memory cap, for four ways of training the same Llama at RANKS
# ranks: plain (data parallel, each rank whole sequences), Ulysses (each rank seq/RANKS of every sequence), Ulysses
# with sequence tiling (the MLP hidden_size positions and the loss TILE positions at a time) and that with activation
# checkpointing and `cpu_checkpointing` (ALST's checkpoint offload; on a CPU-only machine the host is the device, so
# the offload moves nothing and what this row adds is the recomputation). Found by doubling from START, then bisecting
# to within 1/16; one training step per probe (plus one warm-up), each in fresh processes.
#
#   [CAP_MB=1536] [RANKS=2] [VOCAB=32000] [START=1024] [TILE=256] [LIMIT=1048576] \
#     bench/sequence/run_longest_sequence.sh [BIN_DIR]
#
# The cap: RLIMIT_DATA (ulimit -d, CAP_MB per process), which the kernel applies to each rank's private writable
# memory (heap and anonymous mappings: every tensor; not the shared libraries' text), so a probe past it fails its
# allocation and exits non-zero, as an out-of-memory run would. The model: examples/models/tiny_llama (hidden 64,
# intermediate 172, 2 layers, 4 heads, 2 key/value heads) with a VOCAB-word vocabulary, so that the logits weigh as
# a real model's do. Data: byte-level text (the licences, repeated). For each row: the longest sequence, its step
# time, and the step time per token of every row at the plain row's longest sequence (the issue's 1.3x goal).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-build/bin}
for exe in "$BIN/deepspeed" "$BIN/train_llama"; do
  [[ -x $exe ]] || { echo "run_longest_sequence.sh: $exe not found (pass the bin folder)" >&2; exit 2; }
done
CAP_MB=${CAP_MB:-1536}
RANKS=${RANKS:-2}
VOCAB=${VOCAB:-32000}
START=${START:-1024}
TILE=${TILE:-256}
LIMIT=${LIMIT:-1048576}
PORT=${MASTER_PORT:-29791}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/longest_sequence.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

python3 - "$ROOT/examples/models/tiny_llama/config.json" "$WORK/model.json" "$VOCAB" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["vocab_size"] = int(sys.argv[3])
c["max_position_embeddings"] = 1 << 22
json.dump(c, open(sys.argv[2], "w"))
PY
for _ in $(seq 40); do cat /usr/share/common-licenses/*; done > "$WORK/text.txt" 2>/dev/null || true
printf '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 2}}' > "$WORK/ds.json"
printf '{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 2}, "activation_checkpointing": {"cpu_checkpointing": true}}' > "$WORK/ds_offload.json"

flags_of() {  # the train_llama flags of a row
  case $1 in
    plain) echo "--deepspeed_config $WORK/ds.json" ;;
    ulysses) echo "--deepspeed_config $WORK/ds.json --sp_size $RANKS" ;;
    tiled) echo "--deepspeed_config $WORK/ds.json --sp_size $RANKS --tiled_mlp_compute --tiled_loss_tokens $TILE" ;;
    offload) echo "--deepspeed_config $WORK/ds_offload.json --sp_size $RANKS --tiled_mlp_compute" \
                  "--tiled_loss_tokens $TILE --gradient_checkpointing" ;;
  esac
}

# probe <row> <seq>: trains 2 steps under the cap; prints the second step's seconds, or fails.
probe() {
  local out start
  # shellcheck disable=SC2046
  out=$( (ulimit -d $((CAP_MB * 1024)); "$BIN/deepspeed" --num_procs "$RANKS" --master_port "$PORT" \
    "$BIN/train_llama" --model_config "$WORK/model.json" --data "$WORK/text.txt" --seq_len "$2" --steps 2 \
    $(flags_of "$1")) 2>&1) || return 1
  # tokens_per_s over the 2 steps: the global batch (RANKS / sp sequences of seq tokens) per step.
  echo "$out" | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' | head -1
}

echo "longest sequence: $RANKS ranks, RLIMIT_DATA ${CAP_MB} MiB per rank, vocabulary $VOCAB, tile $TILE;" \
  "start: $(uptime)"
declare -A best tps
for row in plain ulysses tiled offload; do
  ok=0 bad=0 seq=$START
  while ((seq <= LIMIT)) && t=$(probe "$row" "$seq"); do ok=$seq; tps[$row]=$t; seq=$((seq * 2)); done
  ((seq <= LIMIT)) && bad=$seq
  if ((ok > 0 && bad > 0)); then
    step=$(( (bad - ok) / 16 )); step=$(( step < 2 * RANKS ? 2 * RANKS : step ))
    while ((bad - ok > step)); do
      mid=$(( (ok + bad) / 2 / (2 * RANKS) * (2 * RANKS) ))
      if t=$(probe "$row" "$mid"); then ok=$mid; tps[$row]=$t; else bad=$mid; fi
    done
  fi
  best[$row]=$ok
  printf "%-8s longest %8d tokens (%s tokens/s there)%s\n" "$row" "$ok" "${tps[$row]:--}" \
    "$( ((ok == LIMIT)) && echo ", the LIMIT: not the cap's" )"
done
if ((best[plain] > 0)); then
  echo "at the plain row's longest sequence (${best[plain]} tokens), tokens/s and time per token against plain:"
  base=$(probe plain "${best[plain]}")
  for row in plain ulysses tiled offload; do
    t=$(probe "$row" "${best[plain]}") || t=0
    awk -v r="$row" -v t="$t" -v b="$base" -v m="${best[$row]}" -v p="${best[plain]}" 'BEGIN {
      printf "%-8s %10.1f tokens/s  time per token %.2fx plain  longest %.1fx plain\n", r, t, (t > 0 ? b / t : 0),
             m / p }'
  done
fi
