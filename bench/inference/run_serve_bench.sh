#!/usr/bin/env bash
# Serving under load on this CPU: ds_serve with continuous batching against ds_serve serving one request at a time
# (the same engine with max_ragged_sequence_count 1) and against transformers' batched generate (static batches,
# serve_transformers.py), the same random Llama-shaped folder (written by transformers, with the shipped byte-level
# tokenizer), fp32 and thread count. serve_load.py drives the server: CLIENTS concurrent streaming clients on
# loopback working through one list of REQUESTS requests (each sends the next as soon as its last one ended),
# staggered starts, prompts of 8-160 tokens and outputs of 32-256 (decode-heavy, as chat is). Reported: generated tokens/s, time to first token and per-token latency p50/p99, the engine's time
# per forward pass and new tokens per pass (from /metrics), and the throughput ratios.
# Shapes: "small" (hidden 256, 4 layers, intermediate 688, 4 heads / 2 key/value heads) and "medium" (hidden 1024,
# 8 layers, intermediate 2816, 16 / 4 heads), both with the tokenizer's 4096-word vocabulary.
#
#   [SHAPES="small medium"] [CLIENTS=8] [REQUESTS=64] [THREADS=1] [PORT=18431] \
#     bench/inference/run_serve_bench.sh [BIN_DIR]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-build/bin}
[[ -x $BIN/ds_serve ]] || { echo "run_serve_bench.sh: $BIN/ds_serve not found" >&2; exit 2; }
PY=${DS_PYTHON:-$ROOT/.venv/bin/python}
SHAPES=${SHAPES:-small medium}
CLIENTS=${CLIENTS:-8}
REQUESTS=${REQUESTS:-64}
# One thread each by default: on a shared 2-core machine two OpenMP threads spin against other work and lose 10-100x
# (transformers' generate measured 26 tok/s at 2 threads, 3100 at 1, one minute apart, the machine at load 4).
THREADS=${THREADS:-1}
PORT=${PORT:-18431}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/serve_bench.XXXXXX")
SERVER=
cleanup() { [[ -n $SERVER ]] && kill "$SERVER" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

"$PY" - "$WORK" "$ROOT/examples/tokenizer" $SHAPES <<'PY'
import shutil, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
shapes = {
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2),
    "medium": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                   num_key_value_heads=4),
}
for name in sys.argv[3:]:
    torch.manual_seed(0)
    # No stop token: every request runs to its max_tokens, in every mode.
    cfg = LlamaConfig(vocab_size=4096, max_position_embeddings=1024, tie_word_embeddings=False, bos_token_id=None,
                      eos_token_id=None, **shapes[name])
    LlamaForCausalLM(cfg).save_pretrained(f"{sys.argv[1]}/{name}")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{sys.argv[2]}/{f}", f"{sys.argv[1]}/{name}")
PY

# The engine: 64-position blocks from a fixed pool, 512 tokens per forward pass; "serial" one sequence per pass.
config() {
  cat > "$WORK/$1.json" <<JSON
{"state_manager": {"max_tracked_sequences": 256, "max_ragged_batch_size": 512, "max_ragged_sequence_count": $2,
                   "max_context": 1024, "memory_config": {"mode": "allocate", "size": 256}},
 "kv_block_size": 64, "dtype": "fp32"}
JSON
}
config continuous 64
config serial 1

serve_run() {  # shape mode -> serve_load's line
  OMP_NUM_THREADS=$THREADS "$BIN/ds_serve" --model_dir "$WORK/$1" --served_model_name bench --port "$PORT" \
    --config "$WORK/$2.json" 2> "$WORK/server.log" &
  SERVER=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
    sleep 0.1
  done
  # Answered by our server, not by another one on the port (ours then failed to bind and exited).
  kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log" >&2; exit 1; }
  "$PY" "$HERE/serve_load.py" "$PORT" bench "$CLIENTS" "$REQUESTS" | tail -1
  kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
}

SUMMARY=
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
echo "| shape | served by | tokens/s | TTFT p50 / p99 ms | per-token p50 / p99 ms | engine ms/pass (tokens/pass) | tokens/s ratio |"
echo "|---|---|---:|---:|---:|---:|---:|"
for shape in $SHAPES; do
  cont=$(serve_run "$shape" continuous)
  serial=$(serve_run "$shape" serial)
  hf=$(OMP_NUM_THREADS=$THREADS "$PY" "$HERE/serve_transformers.py" "$WORK/$shape" "$CLIENTS" "$REQUESTS" \
       "$THREADS" 2>/dev/null | tail -1)
  c=$(field tok_s "$cont"); s=$(field tok_s "$serial"); h=$(field tok_s "$hf")
  row() { echo "| $shape | $1 | $(field tok_s "$2") | $(field ttft_p50_ms "$2") / $(field ttft_p99_ms "$2") |" \
               "$(field tpot_p50_ms "$2") / $(field tpot_p99_ms "$2") |" \
               "$(field pass_ms "$2") ($(field tokens_per_pass "$2")) | $3 |"; }
  row "ds_serve, continuous batching" "$cont" "1.00"
  row "ds_serve, one request at a time" "$serial" "$(python3 -c "print(f'{$s / $c:.2f}')")"
  echo "| $shape | transformers generate, static batches of $CLIENTS (offline) | $h | n/a |" \
       "$(field step_p50_ms "$hf") / $(field step_p99_ms "$hf") (per step) | | $(python3 -c "print(f'{$h / $c:.2f}')") |"
  SUMMARY+=$(python3 -c "print(f'$shape: continuous batching {$c / $s:.2f}x one request at a time, {$c / $h:.2f}x transformers batched')")$'\n'
done
echo "($CLIENTS clients, $REQUESTS requests, $THREADS threads, fp32; ratio column: tokens/s over continuous batching's)"
echo -n "$SUMMARY"
