"""The side-by-side of run_serve_bench.sh: the same requests as serve_load.py's workload, served by transformers'
batched generate on the same model folder and threads, offline (every request present from the start, taken in
order in batches of CLIENTS, each batch left-padded to its longest prompt and run to its longest output: static
batching, as a server without continuous batching would run them). Prints one line of key=value: the requests' own
tokens per second over the whole run, and each batch's time per decoding step p50/p99.

Usage: serve_transformers.py MODEL_DIR CLIENTS REQUESTS THREADS
"""

import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_load import percentile, workload  # noqa: E402


def main():
    model_dir, clients, count, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    requests = workload(count, 4096)  # in the order serve_load's clients send them
    batches = [requests[i:i + clients] for i in range(0, len(requests), clients)]
    step_times, useful = [], 0
    start = time.perf_counter()
    for batch in batches:
        width = max(len(p) for p, _ in batch)
        new = max(n for _, n in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in batch])
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        assert out.shape[1] == width + new
        step_times.append((time.perf_counter() - t0) / new)
        useful += sum(n for _, n in batch)
    wall = time.perf_counter() - start
    print(f"requests={len(requests)} tokens={useful} wall_s={wall:.2f} tok_s={useful / wall:.1f} "
          f"step_p50_ms={percentile(step_times, 50) * 1e3:.2f} step_p99_ms={percentile(step_times, 99) * 1e3:.2f}")


if __name__ == "__main__":
    main()
