#!/usr/bin/env bash
# Generation speed, ours against transformers, on this CPU: time to first token and decode tokens/s of
# deepspeed::init_inference + generate (bench_generate) and of transformers' generate (transformers_generate.py), the
# same random Llama-shaped folder (written by transformers), prompts, greedy settings, fp32 and thread count, one after
# the other in this run. Three shapes: "tiny" (examples/models/tiny_llama's: hidden 64, 2 layers, a 256-word
# vocabulary; the per-token work of the framework is all there is), "small" (hidden 256, 4 layers, vocab 32000:
# ~36 MB of weights read per token) and "medium" (hidden 1024, 8 layers, intermediate 2816, 16 heads / 4 key/value
# heads, vocab 32000: ~150M parameters; the weights' memory traffic dominates). Batch 1 and 8, PROMPT prompt tokens, NEW new tokens.
#
#   [THREADS=2] [PROMPT=64] [NEW=64] [REPEATS=3] bench/inference/run_generate_bench.sh [BIN_DIR]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${1:-build/bin}
[[ -x $BIN/bench_generate ]] || { echo "run_generate_bench.sh: $BIN/bench_generate not found" >&2; exit 2; }
PY=${DS_PYTHON:-$ROOT/.venv/bin/python}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-64}
NEW=${NEW:-64}
REPEATS=${REPEATS:-3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/generate_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

"$PY" - "$WORK" <<'PY'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
shapes = {
    "tiny": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256),
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2),
    "medium": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                   num_key_value_heads=4),
}
for name, shape in shapes.items():
    torch.manual_seed(0)
    cfg = LlamaConfig(**{"vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False, **shape})
    LlamaForCausalLM(cfg).save_pretrained(f"{sys.argv[1]}/{name}")
PY

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
echo "| shape | batch | ttft ms (transformers / ours) | decode tok/s (transformers / ours) | ttft ratio | decode ratio |"
echo "|---|---:|---:|---:|---:|---:|"
for shape in tiny small medium; do
  for batch in 1 8; do
    args=("$WORK/$shape" "$batch" "$PROMPT" "$NEW" "$REPEATS" "$THREADS")
    theirs=$(OMP_NUM_THREADS=$THREADS "$PY" "$HERE/transformers_generate.py" "${args[@]}" 2>/dev/null | tail -1)
    ours=$(OMP_NUM_THREADS=$THREADS "$BIN/bench_generate" "${args[@]}" | tail -1)
    tt=$(field ttft_ms "$theirs"); to=$(field ttft_ms "$ours")
    dt=$(field decode_tok_s "$theirs"); do=$(field decode_tok_s "$ours")
    python3 -c "print(f'| $shape | $batch | $tt / $to | $dt / $do | {$tt / $to:.2f}x | {$do / $dt:.2f}x |')"
  done
done
echo "(ratios: ours faster when > 1; $THREADS threads, prompt $PROMPT, $NEW new tokens, median of $REPEATS)"
