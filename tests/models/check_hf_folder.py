"""Loads each folder our engine saved (llama_engine_test) with transformers and checks that nothing was missing,
unexpected or mis-shaped, and that transformers' logits of the saved batch are ours.

Usage: check_hf_folder.py SAVED_DIR NAME...
"""
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

# Ours and transformers' fp32 forwards run the same operations; allow the reordering of sums over at most
# intermediate_size (64) terms through 2 layers of 3 chained sums (tests/common/tolerance.h's reordered()).
BOUND = 2 ** -23 * 64 * 6


def main():
    saved, names = sys.argv[1], sys.argv[2:]
    passed = failed = 0
    for name in names:
        folder = os.path.join(saved, name)
        model, info = AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys",
                                                                   "mismatched_keys", "error_msgs")}
        ours = load_file(os.path.join(folder, "ours.safetensors"))
        with torch.no_grad():
            logits = model(input_ids=ours["tokens"]).logits
        error = ((logits - ours["logits"]).abs().max() / ours["logits"].abs().max()).item()
        if problems or error > BOUND:
            print(f"FAIL {name}: loading {problems}, relative logit error {error:.3e} (bound {BOUND:.3e})")
            failed += 1
        else:
            print(f"ok {name}: transformers loads it cleanly; relative logit error {error:.3e}")
            passed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


if __name__ == "__main__":
    main()
