"""transformers' own logits processing, for tests/inference/logits_processing_test.cc to match.

Writes to OUT_DIR:
  logits.safetensors   "logits" [3, 50] fp32 (distinct values of both signs), "sequences" [3, 7] int64 (repeated
                       ids, and an id past the vocabulary), and "scores.<case>" [3, 50]: what the processors
                       generate builds for that case return.
  cases.json           each case's settings: name, do_sample, temperature, top_k, top_p, repetition_penalty.
  llama3/, llama2/, qwen2/   generation_config.json as transformers' GenerationConfig.save_pretrained writes them.

The processor list is the one `generate` builds (GenerationMixin._get_logits_processor on a tiny Llama), so the
order of the processors is transformers' and not a copy of it. Usage: logits_reference.py OUT_DIR
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.logits_process import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

VOCAB = 50
CASES = [
    # name, do_sample, temperature, top_k, top_p, repetition_penalty
    ("greedy", False, 1.0, 50, 1.0, 1.0),
    ("penalty", False, 1.0, 50, 1.0, 1.3),
    ("reward", False, 1.0, 50, 1.0, 0.8),
    ("temperature", True, 0.7, 0, 1.0, 1.0),
    ("top_k", True, 1.0, 5, 1.0, 1.0),
    ("top_k_over_vocab", True, 1.0, 50, 1.0, 1.0),
    ("top_p", True, 1.0, 0, 0.8, 1.0),
    ("top_p_tiny", True, 1.0, 0, 0.01, 1.0),
    # 1 - top_p rounds to 1 in fp32: every cumulative sum is <= it, and only min_tokens_to_keep keeps the highest.
    ("top_p_min", True, 1.0, 0, 1e-8, 1.0),
    ("combined", True, 0.7, 5, 0.8, 1.3),
    ("combined_wide", True, 1.3, 10, 0.9, 0.8),
    ("sampling_defaults", True, 1.0, 50, 1.0, 1.0),
]
EXPECTED_ORDER = [RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper]


def inputs():
    g = torch.Generator().manual_seed(60)
    logits = torch.randn(3, VOCAB, generator=g, dtype=torch.float32) * 4
    for row in logits:
        assert row.unique().numel() == VOCAB, "logits must be tie-free: top-k keeps every tie"
    assert (logits < 0).any() and (logits > 0).any()
    # Repeated ids (penalized once), an id past the output vocabulary (penalizes nothing), rows of other lengths' ids.
    sequences = torch.tensor(
        [
            [3, 7, 7, 12, 0, 49, 3],
            [1, 2, 3, 4, 5, 6, VOCAB + 5],
            [int(logits[2].argmax()), int(logits[2].argmin()), 20, 20, 20, 21, 22],
        ],
        dtype=torch.long,
    )
    return logits, sequences


def processors(model, sequences, case):
    _, do_sample, temperature, top_k, top_p, penalty = case
    config = GenerationConfig(
        do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=penalty
    )
    procs = model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=sequences.shape[1],
        encoder_input_ids=sequences,
        prefix_allowed_tokens_fn=None,
        logits_processor=LogitsProcessorList(),
        device="cpu",
        model_kwargs={},
    )
    kinds = [type(p) for p in procs]
    assert kinds == [k for k in EXPECTED_ORDER if k in kinds], f"{case[0]}: transformers' order changed: {kinds}"
    return procs


def write_generation_configs(out_dir):
    # Llama 3.x's and Llama 2's published files, and a Qwen2.5-style one (top_k, repetition penalty, pad).
    GenerationConfig(
        bos_token_id=128000, do_sample=True, eos_token_id=[128001, 128008, 128009], temperature=0.6, top_p=0.9
    ).save_pretrained(os.path.join(out_dir, "llama3"))
    GenerationConfig(
        bos_token_id=1, do_sample=True, eos_token_id=2, max_length=4096, pad_token_id=0, temperature=0.6, top_p=0.9
    ).save_pretrained(os.path.join(out_dir, "llama2"))
    GenerationConfig(
        bos_token_id=151643,
        do_sample=True,
        eos_token_id=[151645, 151643],
        pad_token_id=151643,
        repetition_penalty=1.05,
        temperature=0.7,
        top_k=20,
        top_p=0.8,
    ).save_pretrained(os.path.join(out_dir, "qwen2"))


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=2)
    )
    logits, sequences = inputs()
    tensors = {"logits": logits, "sequences": sequences}
    cases = []
    for case in CASES:
        procs = processors(model, sequences, case)
        tensors["scores." + case[0]] = procs(sequences, logits.clone()).contiguous()
        keys = ("name", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty")
        cases.append(dict(zip(keys, case)))
        print(case[0], [type(p).__name__ for p in procs])
    save_file(tensors, os.path.join(out_dir, "logits.safetensors"))
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)
    write_generation_configs(out_dir)
    print("wrote", out_dir)


if __name__ == "__main__":
    main()
