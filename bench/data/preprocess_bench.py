"""ds_preprocess against Hugging Face `tokenizers` driven from Python, on the same corpus, tokenizer and threads.

    python bench/data/preprocess_bench.py [BIN_DIR] [--workers 2] [--mb 16] [--vocab 16000] [--rounds 3]

The corpus: the licence texts every Debian machine ships (/usr/share/common-licenses), one JSON line per paragraph,
repeated to about --mb MB. The tokenizer: a byte-level BPE in Llama 3's layout (its split regex, ByteLevel, ignore
merges) trained by `tokenizers` on that text to --vocab ids. Both sides read the .jsonl, parse each line and
tokenize the "text" without special tokens, plus the end-of-document id: ours is ds_preprocess --workers W writing
the .bin/.idx; theirs is json.loads per line and Tokenizer.encode_batch (Rust, RAYON_NUM_THREADS=W) collecting the
ids, with no file written (so it is the lower bound of a Python preprocessor built on it). Megatron's
tools/preprocess_data.py is not part of the megatron-core wheel, so it is not timed here. Rounds alternate; the
table gives the median tokens/s of each and their ratio. The token counts must agree.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def corpus(path, mb):
    paragraphs = []
    for f in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(f):
            text = open(f, encoding="utf-8", errors="replace").read()
            paragraphs += [p for p in text.split("\n\n") if p.strip()]
    size = 0
    with open(path, "w", encoding="utf-8") as out:
        while size < mb * 1e6:
            for p in paragraphs:
                line = json.dumps({"text": p}) + "\n"
                out.write(line)
                size += len(line)
    return paragraphs


def train_tokenizer(folder, paragraphs, vocab):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    regex = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab, show_progress=False, special_tokens=["<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(paragraphs, trainer=trainer)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    return tok


def theirs(tok, path, workers):
    os.environ["RAYON_NUM_THREADS"] = str(workers)
    eod = tok.token_to_id("<|end_of_text|>")
    start = time.perf_counter()
    tokens = 0
    batch = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            batch.append(json.loads(line)["text"])
            if len(batch) == 1024:
                tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
                batch = []
    if batch:
        tokens += sum(len(e.ids) + 1 for e in tok.encode_batch(batch, add_special_tokens=False))
    del eod
    return tokens, time.perf_counter() - start


def ours(binary, folder, path, prefix, workers):
    start = time.perf_counter()
    r = subprocess.run([binary, "--input", path, "--output-prefix", prefix, "--tokenizer-model", folder,
                        "--append-eod", "--eod-token", "<|end_of_text|>", "--workers", str(workers),
                        "--log-interval", "1000000000"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(r.stderr)
    tokens = int(r.stdout.split(" documents, ")[1].split(" tokens")[0])
    return tokens, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin", nargs="?", default="build/bin")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mb", type=float, default=16)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import tokenizers
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "corpus.jsonl")
        paragraphs = corpus(path, args.mb)
        tok = train_tokenizer(os.path.join(work, "tok"), paragraphs, args.vocab)
        times = {"ours": [], "tokenizers": []}
        counts = {}
        for r in range(args.rounds):
            for side in (("ours", "tokenizers") if r % 2 == 0 else ("tokenizers", "ours")):
                if side == "ours":
                    n, s = ours(os.path.join(args.bin, "ds_preprocess"), os.path.join(work, "tok"), path,
                                os.path.join(work, "out"), args.workers)
                else:
                    n, s = theirs(tok, path, args.workers)
                counts[side] = n
                times[side].append(n / s)
        if counts["ours"] != counts["tokenizers"]:
            sys.exit(f"token counts differ: ours {counts['ours']}, tokenizers {counts['tokenizers']}")
        o, t = statistics.median(times["ours"]), statistics.median(times["tokenizers"])
        print(f"corpus {os.path.getsize(path) / 1e6:.1f} MB, {counts['ours']} tokens, vocab {tok.get_vocab_size()}, "
              f"{args.workers} workers, {os.cpu_count()} cores, tokenizers {tokenizers.__version__}, "
              f"{args.rounds} rounds")
        print("| side | tokens/s (median) |\n|---|---:|")
        print(f"| ds_preprocess | {o:,.0f} |\n| tokenizers encode_batch from Python | {t:,.0f} |")
        print(f"ratio ours / tokenizers: {o / t:.2f}")


if __name__ == "__main__":
    main()
