#!/usr/bin/env bash
# The main job from a fresh Debian 12 machine: install packages, build, tokenize the embedded default corpus (the
# licence texts every Debian machine ships, one document per paragraph) with the tokenizer the repository ships
# (examples/tokenizer, a 4096-id byte-level BPE) through ds_preprocess into a Megatron indexed dataset, then train the
# example GPT on it with 2 data-parallel ranks and ZeRO stage 2 through the deepspeed launcher (about a minute).
# The tokenized corpus is kept in $build_dir/data and made again only when missing.
# Extra arguments go to train_gpt (e.g. --steps 500 --deepspeed_config my.json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Only what the job runs: the launcher, the tokenizing tool and the example (with the library and models they link),
# not the ~300 targets of tests and benchmarks that scripts/run_tests.sh builds.
bash scripts/build.sh deepspeed_cli ds_preprocess train_gpt
build_dir=${DS_BUILD_DIR:-build}
data=$build_dir/data
if [ ! -f "$data/licences_text_document.idx" ]; then
  mkdir -p "$data"
  # JSON lines, as ds_preprocess (and Megatron's preprocess_data.py) read them.
  .venv/bin/python - "$data/licences.jsonl" << 'PY'
import glob, json, os, sys
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            text = open(path, encoding="utf-8", errors="replace").read()
            for paragraph in (p for p in text.split("\n\n") if p.strip()):
                out.write(json.dumps({"text": paragraph}) + "\n")
PY
  "$build_dir/bin/ds_preprocess" --input "$data/licences.jsonl" --output-prefix "$data/licences" \
    --tokenizer-model examples/tokenizer --append-eod --workers 2 --log-interval 1000000
fi
exec "$build_dir/bin/deepspeed" --num_procs 2 "$build_dir/bin/train_gpt" \
  --deepspeed_config examples/configs/gpt_zero2.json --steps 250 --vocab 4096 \
  --data_path "$data/licences_text_document" "$@"
