#!/usr/bin/env bash
# examples/train_llama end to end through the launcher: a random tiny Llama (examples/models/tiny_llama) trained at
# ZeRO stage 2 on 2 ranks and saved for Hugging Face; transformers loads the folder with nothing missing or unexpected,
# and train_llama fine-tunes it again from that folder (--model_dir) at ZeRO-3 and with --tp_size 2, saving each,
# with --sp_size 2 and as a 2-stage pipeline (saved too);
# ds_to_fp32 --hf turns its checkpoint into the same folder, --load_dir resumes from it; bad input fails with one
# line.
# Usage: train_llama_test.sh BIN_DIR SOURCE_DIR PORT
set -euo pipefail
bin=$1 src=$2 port=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { "$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_llama" "$@"; }
run --model_config "$src/examples/models/tiny_llama/config.json" \
    --deepspeed_config "$src/examples/configs/llama_zero2.json" --steps 6 --seq_len 32 \
    --save_hf "$work/tuned" --save_dir "$work/ckpt" > "$work/first.log" 2>&1 || { cat "$work/first.log"; exit 1; }
grep -q 'final step=6 loss=' "$work/first.log" || { cat "$work/first.log"; echo "no final line"; exit 1; }
# Resumed from the checkpoint (global step 6) to step 8.
run --model_config "$src/examples/models/tiny_llama/config.json" --deepspeed_config "$src/examples/configs/llama_zero2.json" \
    --steps 8 --seq_len 32 --load_dir "$work/ckpt" > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; exit 1; }
grep -q 'final step=8 loss=' "$work/resume.log" || { cat "$work/resume.log"; exit 1; }
# The checkpoint converted by ds_to_fp32 --hf is the same folder, tensor for tensor (both fp32).
"$bin/ds_to_fp32" "$work/ckpt" "$work/from_ckpt" --hf "$src/examples/models/tiny_llama/config.json" > /dev/null
"$DS_PYTHON" - "$work/tuned" "$work/from_ckpt" <<'PY'
import sys
from safetensors.torch import load_file
a, b = (load_file(d + "/model.safetensors") for d in sys.argv[1:])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for k in a:
    assert (a[k] == b[k]).all(), k
PY
"$DS_PYTHON" - "$work/tuned" <<'PY'
import sys
import torch
from transformers import AutoModelForCausalLM
model, info = AutoModelForCausalLM.from_pretrained(sys.argv[1], output_loading_info=True)
bad = {k: v for k, v in info.items() if v}
assert not bad, f"transformers reported {bad}"
assert model.config.rope_parameters["rope_type"] == "llama3", model.config.rope_parameters
with torch.no_grad():
    loss = model(input_ids=torch.arange(32).reshape(1, 32), labels=torch.arange(32).reshape(1, 32)).loss
assert torch.isfinite(loss), loss
print("transformers loads the folder cleanly")
PY
run --model_dir "$work/tuned" --deepspeed_config "$src/examples/configs/llama_zero2.json" --steps 2 --seq_len 32 \
    > "$work/second.log" 2>&1 || { cat "$work/second.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/second.log" || { cat "$work/second.log"; exit 1; }
# Bad input: a folder without weights, one line naming it.
mkdir "$work/empty" && cp "$src/examples/models/tiny_llama/config.json" "$work/empty/"
if run --model_dir "$work/empty" --deepspeed_config "$src/examples/configs/llama_zero2.json" --steps 1 \
    > "$work/bad.log" 2>&1; then echo "an empty folder was accepted"; exit 1; fi
grep -q "train_llama: $work/empty: no model.safetensors or model.safetensors.index.json" "$work/bad.log" \
  || { cat "$work/bad.log"; exit 1; }
# ZeRO stage 3 (each rank loading only its partitions) and tensor parallelism over both ranks (each its slices),
# each from the saved folder and saved again; transformers loads what stage 3 saved.
printf '{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
  "zero_optimization": {"stage": 3}}' > "$work/z3.json"
run --model_dir "$work/tuned" --deepspeed_config "$work/z3.json" --steps 2 --seq_len 32 --save_hf "$work/z3" \
    --gradient_checkpointing \
    > "$work/z3.log" 2>&1 || { cat "$work/z3.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/z3.log" || { cat "$work/z3.log"; exit 1; }
run --model_dir "$work/z3" --deepspeed_config "$src/examples/configs/llama_zero2.json" --tp_size 2 --steps 2 \
    --seq_len 32 --save_hf "$work/tp" > "$work/tp.log" 2>&1 || { cat "$work/tp.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/tp.log" || { cat "$work/tp.log"; exit 1; }
# Ulysses with ALST's tiling flags (the MLP hidden_size positions at a time, the loss 7 at a time).
run --model_dir "$work/tp" --deepspeed_config "$src/examples/configs/llama_zero2.json" --sp_size 2 --steps 2 \
    --seq_len 32 --tiled_mlp_compute --tiled_loss_tokens 7 > "$work/sp.log" 2>&1 || { cat "$work/sp.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/sp.log" || { cat "$work/sp.log"; exit 1; }
# The README's long-sequence command (the shipped ALST config: Ulysses, ZeRO-3, tiling, checkpointing), shorter.
run --model_config "$src/examples/models/tiny_llama/config.json" \
    --deepspeed_config "$src/examples/configs/llama_long_sequence.json" --seq_len 1024 --steps 2 \
    --tiled_mlp_compute --tiled_loss_tokens 256 --gradient_checkpointing > "$work/long.log" 2>&1 \
  || { cat "$work/long.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/long.log" || { cat "$work/long.log"; exit 1; }
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 1}}' > "$work/pipe.json"
run --model_dir "$work/tp" --deepspeed_config "$work/pipe.json" --pipe_stages 2 --steps 2 \
    --seq_len 32 --save_hf "$work/pipe" > "$work/pipe.log" 2>&1 || { cat "$work/pipe.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/pipe.log" || { cat "$work/pipe.log"; exit 1; }
"$DS_PYTHON" - "$work/z3" "$work/tp" "$work/pipe" <<'PY'
import sys
from transformers import AutoModelForCausalLM
for folder in sys.argv[1:]:
    _, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"{folder}: transformers reported {bad}"
PY
echo "1 passed, 0 failed"
