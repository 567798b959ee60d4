"""The fine-tuning references of tests/data/sft_test.cc: prompt/response pairs tokenized by ds_preprocess --sft,
and what Hugging Face would compute from the same pairs: the ids (`tokenizers`), the labels (-100 on the prompt, as
SFT trainers build them) and transformers' loss of a tiny random Llama with the tokenizer's vocabulary.

Usage: make_sft.py BIN_DIR TOKENIZERS_DIR OUT_DIR (TOKENIZERS_DIR: make_tokenizers.py's output). Writes
OUT_DIR/sft_model/ (the Llama), OUT_DIR/pairs_sft_document and _sft_loss_mask_document (.bin/.idx, by ds_preprocess)
and OUT_DIR/expected.json: per pair {"ids": [...], "labels": [...], "loss": transformers' loss of ids[:SEQ + 1]}.
"""
import json
import os
import subprocess
import sys

import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

SEQ = 32  # sft_test.cc's sequence length: some pairs are cut to SEQ + 1 tokens, some padded
PAIRS = [
    ("Translate to German: good morning", "Guten Morgen"),
    ("What is 12 + 30?", "It is 42."),
    ("Write a haiku about the sea.", "Waves fold into foam,\nsalt wind over grey water,\nthe tide keeps its time."),
    ("日本の首都は？", "東京です。"),
    ("Summarise: the quick brown fox jumps over the lazy dog.", "A fox jumps a dog."),
    ("Emoji?", "🙂🤖✨"),
]


def main():
    bin_dir, tok_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    folder = os.path.join(tok_dir, "llama3")
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>"}, f)
    corpus = os.path.join(out, "pairs.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for p, r in PAIRS:
            f.write(json.dumps({"question": p, "answer": r}, ensure_ascii=False) + "\n")
    subprocess.run([os.path.join(bin_dir, "ds_preprocess"), "--input", corpus, "--output-prefix",
                    os.path.join(out, "pairs"), "--tokenizer-model", folder, "--sft", "--prompt-key", "question",
                    "--response-key", "answer", "--append-eod", "--add-special-tokens"], check=True,
                   capture_output=True)
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    eod = tok.token_to_id("<|end_of_text|>")
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(os.path.join(out, "sft_model"))
    expected = []
    for p, r in PAIRS:
        prompt = tok.encode(p, add_special_tokens=True).ids
        response = tok.encode(r, add_special_tokens=False).ids + [eod]
        ids, labels = prompt + response, [-100] * len(prompt) + response
        n = min(len(ids), SEQ + 1)
        with torch.no_grad():
            loss = model(input_ids=torch.tensor([ids[:n]]), labels=torch.tensor([labels[:n]])).loss.item()
        expected.append({"ids": ids, "labels": labels, "loss": loss})
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(f"{len(PAIRS)} pairs; lengths {[len(e['ids']) for e in expected]}; sequence length {SEQ}")


if __name__ == "__main__":
    main()
