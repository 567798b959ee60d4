"""Tiny random Llama-family models made and saved by transformers itself, with transformers' own logits for a fixed
batch: the references of tests/models (our forward must give the same logits from the same folder).

Usage: make_hf_models.py OUT_DIR. Writes OUT_DIR/<name>/ (config.json, safetensors) and OUT_DIR/<name>/reference.pt
is not used: references go to OUT_DIR/<name>.reference.safetensors (tokens, targets, logits, loss).
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config)

SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, rms_norm_eps=1e-5)


def models():
    return {
        # Grouped-query attention, llama3 rope scaling (every band of wavelengths: the smallest is smoothed), biases.
        "llama": LlamaConfig(**SMALL, num_key_value_heads=2, tie_word_embeddings=False, attention_bias=True,
                             mlp_bias=True, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                             "factor": 8.0, "low_freq_factor": 1.0,
                                                             "high_freq_factor": 4.0,
                                                             "original_max_position_embeddings": 16}),
        # q/k/v biases and tied embeddings.
        "qwen2": Qwen2Config(**SMALL, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0),
        "mistral": MistralConfig(**SMALL, num_key_value_heads=1, sliding_window=32, tie_word_embeddings=False),
        # head_dim given (not hidden / heads) and the per-head q/k norms.
        "qwen3": Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False),
    }


def randomize(model, seed):
    # transformers' initialisation leaves biases at 0 and norms at 1: draw them too, so each one matters.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.08 * noise)


def reference(folder, out, dtype=torch.float32, suffix=""):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, model.config.vocab_size, (2, 16), generator=g)
    targets = torch.randint(0, model.config.vocab_size, (2, 16), generator=g)
    targets[0, :3] = -100
    with torch.no_grad():
        logits = model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))
    save_file({"tokens": tokens, "targets": targets, "logits": logits.contiguous(), "loss": loss.reshape(1)},
              out + suffix + ".reference.safetensors")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for i, (name, config) in enumerate(models().items()):
        torch.manual_seed(i)
        model = AutoModelForCausalLM.from_config(config)
        randomize(model, 100 + i)
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        reference(folder, folder)
        if name == "llama":
            # Several shards with an index, as large checkpoints come.
            model.save_pretrained(os.path.join(out, "llama_sharded"), max_shard_size="40KB")
            reference(folder, folder, torch.bfloat16, ".bf16")
    # A published checkpoint's config (transformers 4): rope_theta and rope_scaling at the top level, "type".
    old = os.path.join(out, "qwen2_v4")
    shutil.copytree(os.path.join(out, "qwen2"), old, dirs_exist_ok=True)
    with open(os.path.join(old, "config.json")) as f:
        config = json.load(f)
    config.pop("rope_parameters", None)
    config.pop("dtype", None)
    config.update(rope_theta=50000.0, rope_scaling={"type": "linear", "factor": 2.0}, torch_dtype="float32")
    with open(os.path.join(old, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    reference(old, old)


if __name__ == "__main__":
    main()
