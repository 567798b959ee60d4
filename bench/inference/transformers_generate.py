"""transformers' generate timed as bench_generate times ours (bench/inference/generate_bench.cc): the same prompts,
greedy, no stop token, median over REPEATS after a warm-up; time to first token from 1 new token, decode tokens/s
from NEW_TOKENS minus that.

Usage: transformers_generate.py MODEL_DIR BATCH PROMPT_TOKENS NEW_TOKENS REPEATS THREADS
"""

import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def main():
    model_dir = sys.argv[1]
    batch, tokens, new_tokens, repeats, threads = (int(x) for x in sys.argv[2:7])
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    ids = torch.tensor([[(r * 7919 + i * 104729) % (vocab - 3) + 3 for i in range(tokens)] for r in range(batch)])
    mask = torch.ones_like(ids)

    def median(n):
        def once():
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)
            assert out.shape[1] == tokens + n
            return time.perf_counter() - start
        once()
        return statistics.median(once() for _ in range(repeats))

    first = median(1)
    whole = median(new_tokens)
    print(f"ttft_ms={first * 1e3:.2f} decode_tok_s={(new_tokens - 1) * batch / (whole - first):.1f}")


if __name__ == "__main__":
    main()
