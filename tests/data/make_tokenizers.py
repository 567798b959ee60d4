"""Byte-level BPE tokenizers trained here by Hugging Face `tokenizers` itself, and its own token ids for a
multilingual test text: the references of tests/tokenizer (our tokenizer must give the same ids from the same
tokenizer.json).

Usage: make_tokenizers.py OUT_DIR [SHIPPED_DIR]. With SHIPPED_DIR (examples/tokenizer, the main job's), its
tokenizer.json is copied to OUT_DIR/shipped/ with its expected ids too. Writes OUT_DIR/<name>/tokenizer.json for
  gpt2:   the GPT-2 layout: ByteLevel pre-tokenizer with its own regex, no added special tokens;
  llama3: the Llama 3 / Qwen2 layout: a Split on Llama 3's regex (case-insensitive contractions, digits in threes,
          look-ahead) then ByteLevel without regex, ignore_merges, special tokens and a TemplateProcessing that
          prepends <|begin_of_text|>;
  qwen2:  the llama3 layout behind Qwen2's NFC normalizer, no BOS (composed and decomposed marks meet);
  nfkc:   the gpt2 layout behind a Sequence normalizer [NFKD, NFC] (compatibility forms: ½, ², ǅ, Ⅻ, ﬁ);
  spm:    a SentencePiece BPE model with byte fallback (the Llama 2 / Mistral layout), trained by `sentencepiece`
          0.2.0 into OUT_DIR/spm/tokenizer.model; its references are sentencepiece's encode, with the BOS first for
          ids_special;
and OUT_DIR/<name>.expected.json: [{"text": ..., "ids": [...], "ids_special": [...]}] for every line of TEXTS
(trained on) and UNSEEN (not).
"""
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXTS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "It's 2026: we'll train 1234567 tokens, don't we? I'M SURE THEY'LL",
    "Grüße aus Köln, naïve café — déjà vu.",
    "e\u0301 combining: a\u0300\u0301 o\u0308 (decomposed) vs é (composed)",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 👩‍👩‍👧‍👦 🇫🇷 🤖✨ 👍🏽 and symbols ©®™ ∑∫√",
    "tabs\tand   spaces    and\n\nnewlines\r\n  indented\n\t\tcode();",
    "    leading spaces and trailing spaces    ",
    "def f(x):\n    return x ** 2  # squares\n",
    "Numbers 3.14159, 1,000,000 and 0x1F; dates 2026-12-06.",
    "",
    " ",
    "\n",
    "a",
    "<|begin_of_text|>special tokens <|end_of_text|> inside text<|eot_id|>",
    "Ünïcödé ẞ ß ǅ ǆ Ⅻ ½ ² ٣ ४ \ufb01nal \ufb00 \u212b vs \u00c5, \u2126 vs \u03a9, \u1e9b\u0323",
]

# Texts the tokenizers were not trained on: words split part-way by the merges.
UNSEEN = [
    "Unfamiliar wordings: antidisestablishmentarianism, Pneumonoultramicroscopic!",
    "Kölner Straßenbahn fährt über Brücken; 北京大学 and 大阪城 🙂🤖",
    "  x=  42;;   y = 'quoted' \"double\" `tick`  \n\n\n   ",
]

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]


def training_text():
    # The test text many times, plus a little more, so merges cover multi-byte characters and whitespace runs.
    extra = ["the of and to in is was for on that with as by at from", "東京 大阪 京都 北京 上海", "🙂🙃😉 ✓ ✗",
             "    indent\n        deeper\n", "1 22 333 4444 55555", "Straße Größe Maß"]
    return (TEXTS + extra) * 20


def train(name):
    tok = Tokenizer(models.BPE(ignore_merges=(name in ("llama3", "qwen2"))))
    if name == "qwen2":
        tok.normalizer = normalizers.NFC()
    elif name == "nfkc":
        tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.NFC()])
    if name in ("gpt2", "nfkc"):
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=SPECIAL if name in ("llama3", "qwen2") else [])
    tok.train_from_iterator(training_text(), trainer=trainer)
    if name == "llama3":
        bos = tok.token_to_id(SPECIAL[0])
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", bos)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def sentencepiece_model(out):
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_text()), model_writer=model, vocab_size=400,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   split_digits=True, minloglevel=2)
    os.makedirs(f"{out}/spm", exist_ok=True)
    with open(f"{out}/spm/tokenizer.model", "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    expected = [{"text": t, "ids": sp.encode(t), "ids_special": [sp.bos_id()] + sp.encode(t), "vocab": 400}
                for t in TEXTS + UNSEEN]
    with open(f"{out}/spm.expected.json", "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False)
    print(f"spm: vocabulary {sp.get_piece_size()}, {len(expected)} texts")


def main():
    out = sys.argv[1]
    sentencepiece_model(out)
    for name in ("gpt2", "llama3", "qwen2", "nfkc") + (("shipped",) if len(sys.argv) > 2 else ()):
        tok = Tokenizer.from_file(f"{sys.argv[2]}/tokenizer.json") if name == "shipped" else train(name)
        os.makedirs(f"{out}/{name}", exist_ok=True)
        tok.save(f"{out}/{name}/tokenizer.json")
        expected = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids,
                     "ids_special": tok.encode(t, add_special_tokens=True).ids} for t in TEXTS + UNSEEN]
        with open(f"{out}/{name}.expected.json", "w", encoding="utf-8") as f:
            json.dump(expected, f, ensure_ascii=False)
        print(f"{name}: vocabulary {tok.get_vocab_size()}, {len(TEXTS)} texts")


if __name__ == "__main__":
    main()
