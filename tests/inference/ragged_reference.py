"""References for tests/inference/ragged_engine_test.cc (the FastGen-style serving engine).

1. transformers' own `generate` on the tiny Llama-family folders of tests/models (make_hf_models.py): several
   requests of different prompt lengths and token limits, each generated alone (greedy, the folder's
   generation_config.json: stop token 2; some with a repetition penalty), cut after the first stop token. However the
   engine batches, splits and interleaves them, each request's tokens must be these.
2. DeepSpeed's own reading of serving configs (RaggedInferenceEngineConfig, deepspeed 0.19.x inference v2): the values
   it reads for each config, or null where it refuses the config.

Writes OUT_DIR/ragged_reference.json and OUT_DIR/ragged_configs.json.
Usage: ragged_reference.py HF_MODELS_DIR OUT_DIR
"""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM

# (prompt length, max_new_tokens, repetition_penalty); the folders' max_position_embeddings is 64.
REQUESTS = [(5, 24, 1.0), (23, 30, 1.0), (1, 16, 1.0), (13, 28, 2.5), (30, 20, 1.0), (9, 12, 1.0), (17, 26, 1.0)]
# Mistral's 32-token sliding window bounds a request's positions (the engine refuses longer ones).
MISTRAL_REQUESTS = [(3, 12, 1.0), (14, 16, 1.0), (9, 20, 2.5), (20, 10, 1.0)]


def alone(model, prompt, max_new_tokens, penalty):
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=0, repetition_penalty=penalty)
    cut = []
    for t in out[0, len(prompt):].tolist():
        cut.append(t)
        if t in eos:
            break
    return cut


def generate_cases(models_dir):
    cases = []
    for seed, name in enumerate(("llama", "qwen2", "qwen3", "mistral")):
        model = AutoModelForCausalLM.from_pretrained(os.path.join(models_dir, name), dtype=torch.float32).eval()
        g = torch.Generator().manual_seed(100 + seed)
        requests = []
        for n, max_new, penalty in (MISTRAL_REQUESTS if name == "mistral" else REQUESTS):
            # Ids from 3 up: never the stop token (2) inside a prompt.
            prompt = torch.randint(3, model.config.vocab_size, (n,), generator=g).tolist()
            requests.append({"prompt": prompt, "max_new_tokens": max_new, "repetition_penalty": penalty,
                             "tokens": alone(model, prompt, max_new, penalty)})
        cases.append({"model": name, "requests": requests})
    return cases


CONFIGS = [
    {},
    {"tensor_parallel": {"tp_size": 2},
     "state_manager": {"max_tracked_sequences": 64, "max_ragged_batch_size": 16, "max_ragged_sequence_count": 4,
                       "max_context": 64, "memory_config": {"mode": "allocate", "size": 40}}},
    {"tp": {"tp_size": 1}, "manager": {"max_context": 128, "memory_config": {"mode": "reserve", "size": 1000}}},
    {"state_manager": {"offload": False}, "quantization": {"quantization_mode": None}},
    # Refused by DeepSpeed: an unknown key at each level, a memory mode it does not know, a sequence count over the
    # token budget or over the tracked sequences, a zero, a section that is not an object.
    {"bogus": 1},
    {"state_manager": {"max_ragged_batch": 16}},
    {"state_manager": {"memory_config": {"mode": "allocate", "blocks": 8}}},
    {"state_manager": {"memory_config": {"mode": "borrow"}}},
    {"state_manager": {"max_ragged_batch_size": 8, "max_ragged_sequence_count": 16}},
    {"state_manager": {"max_tracked_sequences": 4, "max_ragged_sequence_count": 8}},
    {"state_manager": {"max_context": 0}},
    {"state_manager": {"memory_config": {"size": 0}}},
    {"tensor_parallel": {"tp_size": 2, "enabled": True}},
    {"state_manager": None},
]


def read_config(config):
    from deepspeed.inference.v2.config_v2 import RaggedInferenceEngineConfig
    try:
        c = RaggedInferenceEngineConfig(**config)
    except Exception:  # pydantic's ValidationError
        return None
    m = c.state_manager
    mode = m.memory_config.mode
    return {"tp_size": c.tensor_parallel.tp_size, "max_tracked_sequences": m.max_tracked_sequences,
            "max_ragged_batch_size": m.max_ragged_batch_size, "max_ragged_sequence_count": m.max_ragged_sequence_count,
            "max_context": m.max_context, "mode": getattr(mode, "value", mode), "size": m.memory_config.size}


def main():
    models_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    cases = generate_cases(models_dir)
    with open(os.path.join(out_dir, "ragged_reference.json"), "w") as f:
        json.dump(cases, f)
    configs = [{"config": c, "deepspeed": read_config(c)} for c in CONFIGS]
    with open(os.path.join(out_dir, "ragged_configs.json"), "w") as f:
        json.dump(configs, f)
    stops = sum(1 for c in cases for r in c["requests"] if len(r["tokens"]) < r["max_new_tokens"])
    refused = sum(c["deepspeed"] is None for c in configs)
    print(f"ragged_reference: {len(cases)} models, {stops} requests stopped early; {refused} of {len(configs)} "
          "configs refused by DeepSpeed")


if __name__ == "__main__":
    main()
