"""A tiny random Llama with the shipped byte-level tokenizer (examples/tokenizer), saved by transformers, and what
transformers' generate prints for it: the reference of tests/inference/ds_generate_test.sh.

Writes OUT_DIR/model/ (config.json, model.safetensors, generation_config.json, tokenizer.json,
tokenizer_config.json) and OUT_DIR/expected.txt: for two prompts generated as one left-padded batch (greedy, 24 new
tokens, stop at <|end_of_text|>), each continuation decoded with skip_special_tokens, in ds_generate's layout.

Usage: ds_generate_reference.py OUT_DIR TOKENIZER_DIR
"""

import os
import shutil
import sys

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

PROMPTS = ["The quick brown fox", "Hello, world! Once upon a time there was"]


def main():
    out_dir, tokenizer_dir = sys.argv[1], sys.argv[2]
    model_dir = os.path.join(out_dir, "model")
    os.makedirs(model_dir, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, name), model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    eos = tok.convert_tokens_to_ids("<|end_of_text|>")
    torch.manual_seed(0)
    # Wide initial weights: the logits of a tiny random model then differ by far more than rounding, so greedy picks
    # the same token in any correct implementation.
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      initializer_range=0.3, tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos,
                      pad_token_id=eos)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.do_sample = False
    model.save_pretrained(model_dir)
    tok.padding_side = "left"
    tok.pad_token = "<|end_of_text|>"
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=24, do_sample=False, pad_token_id=eos)
    lines = []
    for i in range(len(PROMPTS)):
        lines.append(f"=== prompt {i} ===")
        lines.append(tok.decode(out[i, batch["input_ids"].shape[1]:], skip_special_tokens=True))
    with open(os.path.join(out_dir, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
