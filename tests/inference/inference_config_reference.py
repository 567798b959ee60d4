"""DeepSpeed's own reading of init_inference configs (DeepSpeedInferenceConfig, deepspeed 0.19.x), for
tests/inference/inference_config_test.cc to match: for each config, the dtype, tensor-parallel size, max_out_tokens
and kernel-injection switch DeepSpeed reads, or null where DeepSpeed refuses the config.

Usage: inference_config_reference.py OUT_DIR (writes OUT_DIR/inference_configs.json)
"""

import json
import os
import sys

from deepspeed.inference.config import DeepSpeedInferenceConfig

CONFIGS = [
    {},
    {"dtype": "bf16", "tensor_parallel": {"tp_size": 2}, "max_out_tokens": 2048, "replace_with_kernel_inject": True},
    {"dtype": "torch.float16", "mp_size": 2},
    {"dtype": "fp16", "kernel_inject": True, "max_tokens": 512},
    {"dtype": "float32", "tensor_parallel": {"enabled": True, "tp_size": 1}},
    {"dtype": "torch.bfloat16", "enable_cuda_graph": False, "triangular_masking": True, "return_tuple": True},
    {"dtype": "half"},
    # Refused by DeepSpeed: an unknown key, a dtype it does not know, a misspelt section key.
    {"bogus": 1},
    {"dtype": "int4"},
    {"tensor_parallel": {"tp_sizes": 2}},
]


def read(config):
    try:
        c = DeepSpeedInferenceConfig(**config)
    except Exception:  # pydantic's ValidationError, or DeepSpeed's own checks
        return None
    return {"dtype": str(c.dtype).replace("torch.", ""), "tp_size": c.tensor_parallel.tp_size,
            "max_out_tokens": c.max_out_tokens, "kernel_inject": bool(c.replace_with_kernel_inject)}


def main():
    os.makedirs(sys.argv[1], exist_ok=True)
    cases = [{"config": c, "deepspeed": read(c)} for c in CONFIGS]
    with open(os.path.join(sys.argv[1], "inference_configs.json"), "w") as f:
        json.dump(cases, f)
    print("inference_config_reference:", sum(c["deepspeed"] is None for c in cases), "of", len(cases), "refused")


if __name__ == "__main__":
    main()
