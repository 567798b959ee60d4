"""ds_preprocess against the references: its .bin/.idx read by megatron-core's IndexedDataset hold, document for
document, the ids Hugging Face `tokenizers` gives for each line's text (plus the end-of-document token); --workers 4
writes the same bytes as --workers 1; a bad line fails with one line naming file:line and leaves no output.

Usage: check_preprocess.py BIN_DIR TOKENIZERS_DIR (make_tokenizers.py's output)
"""
import json
import os
import subprocess
import sys
import tempfile

from megatron.core.datasets.indexed_dataset import IndexedDataset
from tokenizers import Tokenizer


def run(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True)


def main():
    bin_dir, tok_dir = sys.argv[1], sys.argv[2]
    tool = os.path.join(bin_dir, "ds_preprocess")
    folder = os.path.join(tok_dir, "llama3")
    with open(os.path.join(tok_dir, "llama3.expected.json"), encoding="utf-8") as f:
        texts = [e["text"] for e in json.load(f)]
    reference = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    eod = reference.token_to_id("<|end_of_text|>")
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": "<|end_of_text|>"}, f)
        corpus = os.path.join(work, "corpus.jsonl")
        with open(corpus, "w", encoding="utf-8") as f:
            for i, t in enumerate(texts * 30):
                f.write(json.dumps({"text": t, "id": i}, ensure_ascii=(i % 2 == 0)) + "\n")
                if i == 5:
                    f.write("\n")  # a blank line: no document
        outputs = {}
        for workers in ("1", "4"):
            prefix = os.path.join(work, f"w{workers}")
            r = run(tool, "--input", corpus, "--output-prefix", prefix, "--tokenizer-model", folder,
                    "--json-keys", "text", "--append-eod", "--workers", workers)
            assert r.returncode == 0, r.stderr
            outputs[workers] = [open(f"{prefix}_text_document.{ext}", "rb").read() for ext in ("bin", "idx")]
        assert outputs["1"] == outputs["4"], "--workers 4 wrote other bytes than --workers 1"
        ds = IndexedDataset(os.path.join(work, "w1_text_document"))
        want = [reference.encode(t, add_special_tokens=False).ids + [eod] for t in texts * 30]
        assert len(ds) == len(want), (len(ds), len(want))
        for i, ids in enumerate(want):
            got = ds[i].tolist()
            assert got == ids, f"document {i}: ds_preprocess {got[:10]}... vs tokenizers {ids[:10]}..."
        print(f"ds_preprocess: {len(ds)} documents equal tokenizers' ids, read by megatron-core; workers 1 == 4")
        # Bad input: line 3 is not JSON; a line without the key. No output either time.
        for bad, says in (('{"text": "a"}\n{"text": "b"}\n{"text": broken\n', ":3: not a JSON object"),
                          ('{"text": "a"}\n{"body": "b"}\n', ':2: no string "text"')):
            path = os.path.join(work, "bad.jsonl")
            with open(path, "w") as f:
                f.write(bad)
            r = run(tool, "--input", path, "--output-prefix", os.path.join(work, "bad"), "--tokenizer-model", folder)
            assert r.returncode == 1 and (path + says) in r.stderr and r.stderr.count("\n") == 1, r.stderr
            leftovers = [n for n in os.listdir(work) if n.startswith("bad_")]
            assert not leftovers, leftovers
        r = run(tool, "--input", corpus, "--output-prefix", os.path.join(work, "x"), "--tokenizer-model",
                os.path.join(tok_dir, "gpt2"), "--append-eod")
        assert r.returncode == 1 and "no --eod-token given" in r.stderr, r.stderr
        print("ds_preprocess: bad lines and a missing end-of-document token refused by name, nothing written")


if __name__ == "__main__":
    main()
