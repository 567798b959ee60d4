#!/usr/bin/env bash
# ds_generate against transformers (ds_generate_reference.py's expected.txt: the same folder, prompts and greedy
# settings through transformers' tokenizer, generate and decode): the same text in one process and at 2
# tensor-parallel ranks through the launcher; seeded sampling repeats; bad input is one line and exit 1.
#   usage: ds_generate_test.sh <bin-dir> <reference-dir> <port>
set -u
bin=$1 ref=$2 port=$3
model="$ref/model"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "FAIL: $*"; cat "$log"; exit 1; }
prompts=(--prompt "The quick brown fox" --prompt "Hello, world! Once upon a time there was")

"$bin/ds_generate" --model_dir "$model" "${prompts[@]}" --max_new_tokens 24 > "$log" 2>&1 || fail "ds_generate exited with $?"
diff "$ref/expected.txt" "$log" > /dev/null || { diff "$ref/expected.txt" "$log"; fail "the text differs from transformers'"; }

"$bin/deepspeed" --num_procs 2 --master_port "$port" "$bin/ds_generate" --model_dir "$model" "${prompts[@]}" \
  --max_new_tokens 24 --tp_size 2 > "$log" 2>&1 || fail "ds_generate --tp_size 2 exited with $?"
# The launcher prefixes rank 0's lines with [rank0]: only rank 0 prints.
sed -n 's/^\[rank0\]: //p' "$log" | diff "$ref/expected.txt" - > /dev/null || fail "the text at 2 tensor-parallel ranks differs"

"$bin/ds_generate" --model_dir "$model" --prompt "Once" --max_new_tokens 16 --temperature 0.9 --top_p 0.95 --seed 3 \
  --print_ids > "$log" 2>&1 || fail "sampling exited with $?"
first=$(cat "$log")
"$bin/ds_generate" --model_dir "$model" --prompt "Once" --max_new_tokens 16 --temperature 0.9 --top_p 0.95 --seed 3 \
  --print_ids > "$log" 2>&1 || fail "sampling exited with $?"
[ "$first" = "$(cat "$log")" ] || fail "the same seed sampled other tokens"
grep -q "^ids: " "$log" || fail "--print_ids printed no ids"

"$bin/ds_generate" --model_dir /nonexistent/folder --prompt "x" > "$log" 2>&1 && fail "a missing folder was accepted"
[ "$(wc -l < "$log")" -eq 1 ] && grep -q "^ds_generate: error: .*/nonexistent/folder" "$log" || fail "no one-line error naming the folder"
"$bin/ds_generate" --model_dir "$model" --prompt "x" --top_p 1.5 > "$log" 2>&1 && fail "top_p 1.5 was accepted"
grep -q "^ds_generate: error: ds_generate: top_p must be in (0, 1], got 1.5" "$log" || fail "no clear message for top_p"
echo "ds_generate: all checks passed"
