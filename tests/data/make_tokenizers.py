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

Decoding: OUT_DIR/<name>.decode.json: [{"ids": [...], "skip_special_tokens": bool, "text": ...}], the reference's
decode (tokenizers' decode; sentencepiece's decode for spm, control pieces dropped first with skip_special_tokens) of
each text's ids and ids_special (both skip_special_tokens values), of every id alone, of the ids of each text cut
after and before every token (cuts inside a multi-byte character), and of the byte tokens of BYTE_CUTS (ill-formed
UTF-8 that comes out as U+FFFD, one per maximal ill-formed subpart as Rust's from_utf8_lossy counts them); also for
  nodecoder: the llama3 tokenizer.json without a decoder (tokenizers then joins the token strings with spaces).
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
# Byte sequences that are not UTF-8, as ids of single-byte tokens: a character cut at the end or start, a lead byte
# followed by ASCII, an overlong form, a surrogate, a code point above U+10FFFF, a lone continuation byte, bytes that
# are never UTF-8, and a good character between bad ones.
BYTE_CUTS = [b"\xe6\x97", b"\xf0\x9f\x98", b"\x97\xa5", b"\xe6\x97A", b"\xf0\x9f\x98 x", b"\xc0\xaf",
             b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xfe\xff", b"\xff\xe6\x97\xa5\xe6",
             b"\xe2\x82", b"\xf1\x80\x80", b"a\xc3", b"\xc3\xa9\xc3"]

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


def gpt2_bytes_to_unicode():
    # GPT-2's byte-to-character map, which names the byte tokens of a byte-level BPE vocabulary.
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 256
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(extra)
            extra += 1
    return chars


def decode_cases(name, decode, expected, vocab_size, byte_id):
    # The decode references of one tokenizer: decode(ids, skip) is the reference; byte_id(b) the id of byte b's token.
    cases = []

    def add(ids, skip=False):
        cases.append({"ids": ids, "skip_special_tokens": skip, "text": decode(ids, skip)})

    for e in expected:
        add(e["ids"])
        add(e["ids_special"], False)
        add(e["ids_special"], True)
    for i in range(vocab_size):
        add([i])
    for e in expected[4:6] + expected[-2:-1]:  # CJK and Hangul, emoji with joiners, umlauts and CJK
        for k in range(1, len(e["ids"])):
            add(e["ids"][:k])
            add(e["ids"][k:])
    for cut in BYTE_CUTS:
        add([byte_id(b) for b in cut])
    assert name == "nodecoder" or any("\ufffd" in c["text"] for c in cases[-len(BYTE_CUTS):]), name
    return cases


def write_decode_cases(out, name, cases):
    with open(f"{out}/{name}.decode.json", "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


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

    def decode(ids, skip):
        return sp.decode([i for i in ids if not (skip and sp.is_control(i))])

    write_decode_cases(out, "spm", decode_cases("spm", decode, expected, sp.get_piece_size(),
                                                lambda b: sp.piece_to_id(f"<0x{b:02X}>")))
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
        write_bpe_decode_cases(out, name, tok, expected)
        if name == "llama3":
            tok.decoder = None
            os.makedirs(f"{out}/nodecoder", exist_ok=True)
            tok.save(f"{out}/nodecoder/tokenizer.json")
            write_bpe_decode_cases(out, "nodecoder", tok, expected)
        print(f"{name}: vocabulary {tok.get_vocab_size()}, {len(TEXTS)} texts")


def write_bpe_decode_cases(out, name, tok, expected):
    byte_char = gpt2_bytes_to_unicode()

    def decode(ids, skip):
        return tok.decode(ids, skip_special_tokens=skip)

    cases = decode_cases(name, decode, expected, tok.get_vocab_size(), lambda b: tok.token_to_id(byte_char[b]))
    if name in ("gpt2", "llama3", "shipped"):  # no normalizer: decoding gives the text back
        for e, c in zip(expected, cases[::3]):
            assert c["text"] == e["text"], (name, e["text"], c["text"])
    write_decode_cases(out, name, cases)


if __name__ == "__main__":
    main()
