"""How examples/tokenizer/tokenizer.json was made (run once; the result is committed, so the main job needs no
download and no Python tokenizer): a byte-level BPE in Llama 3's layout (its split regex, ByteLevel without regex,
ignore_merges), 4096 ids, trained by Hugging Face `tokenizers` on the texts of the main job's default corpus, the
licence texts every Debian machine ships under /usr/share/common-licenses (one document per paragraph), with
<|end_of_text|> as its one special token (tokenizer_config.json names it the end-of-document token).

    .venv/bin/python examples/tokenizer/train_tokenizer.py examples/tokenizer
"""
import glob
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def paragraphs():
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                yield from (p for p in f.read().split("\n\n") if p.strip())


def main():
    out = sys.argv[1]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(REGEX), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, show_progress=False, special_tokens=["<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(paragraphs()), trainer=trainer)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>", "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
        f.write("\n")
    print(f"{out}/tokenizer.json: {tok.get_vocab_size()} ids")


if __name__ == "__main__":
    main()
