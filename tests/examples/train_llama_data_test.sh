#!/usr/bin/env bash
# examples/train_llama on tokenized corpora (--data_path, deepspeed/data/): a corpus written by megatron-core's own
# builder trains the tiny Llama at 2 ranks; a run stopped after 2 steps and resumed at 1 rank (the same global batch
# of 8 as one micro-batch of 8) ends at the uninterrupted run's loss (one that re-read its first samples instead
# measured 4.9e-2 away);
# a blend of two corpora trains; a token outside the vocabulary and a missing corpus fail with one line naming them;
# fine-tuning pairs from ds_preprocess --sft train, and the saved folder generates with ds_generate; train_gpt trains
# on the same corpus.
# Usage: train_llama_data_test.sh BIN_DIR SOURCE_DIR PORT
set -euo pipefail
bin=$1 src=$2 port=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$DS_PYTHON" - "$work" <<'PY' 2> /dev/null
import sys, numpy, torch
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
rng = numpy.random.RandomState(0)
for name, top in (("corpus", 256), ("other", 256), ("wide", 300)):
    builder = IndexedDatasetBuilder(f"{sys.argv[1]}/{name}_text_document.bin", dtype=numpy.uint16)
    for _ in range(200):
        builder.add_item(torch.tensor(rng.randint(0, top, rng.randint(20, 120)), dtype=torch.int64))
        builder.end_document()
    builder.finalize(f"{sys.argv[1]}/{name}_text_document.idx")
PY
model=(--model_config "$src/examples/models/tiny_llama/config.json" --seq_len 32)
run() { local n=$1; shift; "$bin/deepspeed" --num_procs "$n" --master_port "$port" "$bin/train_llama" "${model[@]}" "$@"; }
loss_of() { sed -n 's/.*final step=[0-9]* loss=\([^ ]*\).*/\1/p' "$1"; }
z2=$src/examples/configs/llama_zero2.json
run 2 --deepspeed_config "$z2" --data_path "$work/corpus_text_document" --steps 4 > "$work/whole.log" 2>&1 \
  || { cat "$work/whole.log"; exit 1; }
grep -q "samples of 32 tokens from $work/corpus_text_document" "$work/whole.log" || { cat "$work/whole.log"; exit 1; }
run 2 --deepspeed_config "$z2" --data_path "$work/corpus_text_document" --steps 2 --save_dir "$work/ckpt" \
  > "$work/first.log" 2>&1 || { cat "$work/first.log"; exit 1; }
sed 's/"train_micro_batch_size_per_gpu": 4/"train_micro_batch_size_per_gpu": 8/' "$z2" > "$work/one_rank.json"
run 1 --deepspeed_config "$work/one_rank.json" --data_path "$work/corpus_text_document" --steps 4 \
  --load_dir "$work/ckpt" > "$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; exit 1; }
"$DS_PYTHON" - "$(loss_of "$work/whole.log")" "$(loss_of "$work/resumed.log")" <<'PY'
import sys
whole, resumed = float(sys.argv[1]), float(sys.argv[2])
# fp32 sums over 2 ranks against 1 for two Adam steps: rounding, far below what other samples change (~1e-2).
rel = abs(whole - resumed) / whole
assert rel < 1e-4, f"resumed at 1 rank: loss {resumed} vs uninterrupted {whole} (relative {rel:.2e})"
print(f"resumed at another world size: loss {resumed} vs {whole}, relative {rel:.1e}")
PY
run 2 --deepspeed_config "$z2" --data_path "0.3 $work/corpus_text_document 0.7 $work/other_text_document" --steps 2 \
  > "$work/blend.log" 2>&1 || { cat "$work/blend.log"; exit 1; }
grep -q 'final step=2 loss=' "$work/blend.log" || { cat "$work/blend.log"; exit 1; }
if run 2 --deepspeed_config "$z2" --data_path "$work/wide_text_document" --steps 2 > "$work/bad.log" 2>&1; then
  echo "token ids above the vocabulary were accepted"; exit 1
fi
grep -q "is outside the model's vocabulary of 256" "$work/bad.log" || { cat "$work/bad.log"; exit 1; }
if run 2 --deepspeed_config "$z2" --data_path "$work/missing" --steps 2 > "$work/missing.log" 2>&1; then
  echo "a missing corpus was accepted"; exit 1
fi
grep -q "$work/missing.idx: cannot open" "$work/missing.log" || { cat "$work/missing.log"; exit 1; }
# Fine-tuning pairs: ds_preprocess --sft with the shipped tokenizer (4096 ids), trained by a 4096-id tiny Llama.
printf '%s\n' '{"prompt": "What is the GPL?", "response": "A copyleft licence."}' \
  '{"prompt": "Who may copy it?", "response": "Everyone, under its terms."}' \
  '{"prompt": "Is there a warranty?", "response": "No, there is no warranty for the program."}' > "$work/pairs.jsonl"
"$bin/ds_preprocess" --input "$work/pairs.jsonl" --output-prefix "$work/pairs" --tokenizer-model "$src/examples/tokenizer" \
  --sft --append-eod > "$work/sft_prep.log" 2>&1 || { cat "$work/sft_prep.log"; exit 1; }
sed 's/"vocab_size": 256/"vocab_size": 4096/' "$src/examples/models/tiny_llama/config.json" > "$work/tiny4096.json"
"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_llama" --model_config "$work/tiny4096.json" \
  --seq_len 32 --deepspeed_config "$z2" --sft_data_path "$work/pairs" --steps 2 --save_hf "$work/trained" \
  --save_dir "$work/sft_ckpt" \
  > "$work/sft.log" 2>&1 || { cat "$work/sft.log"; exit 1; }
grep -q "fine-tuning samples of 32 tokens from $work/pairs" "$work/sft.log" && grep -q 'final step=2 loss=' "$work/sft.log" \
  || { cat "$work/sft.log"; exit 1; }
# The README's walk-through from there: the tokenizer beside the saved folder, then ds_generate continues a prompt.
cp "$src/examples/tokenizer/tokenizer.json" "$src/examples/tokenizer/tokenizer_config.json" "$work/trained/"
"$bin/ds_generate" --model_dir "$work/trained" --prompt "What is the GPL?" --max_new_tokens 8 --print_ids \
  > "$work/generate.log" 2>&1 || { cat "$work/generate.log"; exit 1; }
[ "$(grep -c '^ids: [0-9]' "$work/generate.log")" = 1 ] && [ "$(grep -o '[0-9][0-9]*' <<< "$(grep '^ids:' "$work/generate.log")" | wc -l)" = 8 ] \
  || { cat "$work/generate.log"; echo "ds_generate did not print 8 new tokens"; exit 1; }
# The same weights straight from the run's ZeRO-2 checkpoint (both ranks' fp32 partitions), at 1 and at 2
# tensor-parallel ranks: the same tokens. Another model's checkpoint is refused naming the parameter.
gen=(--prompt "What is the GPL?" --max_new_tokens 8 --print_ids)
"$bin/ds_generate" --model_dir "$work/trained" --checkpoint "$work/sft_ckpt" "${gen[@]}" > "$work/from_ckpt.log" 2>&1 \
  && diff -q "$work/generate.log" "$work/from_ckpt.log" > /dev/null \
  || { cat "$work/generate.log" "$work/from_ckpt.log"; echo "generation from the checkpoint differs"; exit 1; }
"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/ds_generate" --model_dir "$work/trained" \
  --checkpoint "$work/sft_ckpt" --tp_size 2 "${gen[@]}" > "$work/from_ckpt_tp.log" 2>&1 \
  && sed -n 's/^\[rank0\]: //p' "$work/from_ckpt_tp.log" | diff -q "$work/generate.log" - > /dev/null \
  || { cat "$work/from_ckpt_tp.log"; echo "generation from the checkpoint at 2 tensor-parallel ranks differs"; exit 1; }
if "$bin/ds_generate" --model_dir "$work/trained" --checkpoint "$work/ckpt" "${gen[@]}" > "$work/wrong.log" 2>&1; then
  echo "another model's checkpoint was accepted"; exit 1
fi
grep -q "^ds_generate: error: .*parameter 'model.embed_tokens.weight' has shape \[256, 64\], the model's is \[4096, 64\]" \
  "$work/wrong.log" || { cat "$work/wrong.log"; exit 1; }
# train_gpt reads the same corpora.
"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/train_gpt" --deepspeed_config "$src/examples/configs/gpt_zero2.json" \
  --data_path "$work/corpus_text_document" --steps 2 --seq_len 32 --layers 2 --hidden 64 --heads 4 > "$work/gpt.log" 2>&1 \
  || { cat "$work/gpt.log"; exit 1; }
grep -q "samples of 32 tokens from $work/corpus_text_document" "$work/gpt.log" && grep -q 'final step=2 loss=' "$work/gpt.log" \
  || { cat "$work/gpt.log"; exit 1; }
echo "train_llama and train_gpt on tokenized corpora: OK"
