"""A load client for ds_serve (run_serve_bench.sh): CLIENTS concurrent clients on loopback work through one fixed
list of REQUESTS streamed /v1/completions requests, each client sending the list's next request as soon as its
previous one ended (a closed loop at a concurrency of CLIENTS, as vLLM's benchmark_serving --max-concurrency),
client i starting STAGGER * i seconds in. Prompts and outputs of mixed lengths (workload() below; prompts as token
ids so every run sends the same tokens). Prints one line of key=value: generated tokens/s over the whole run, time
to first token and per-token latency (after the first) p50/p99 over the requests, and from /metrics the engine's
mean time per forward pass and new tokens per pass.

Usage: serve_load.py PORT MODEL CLIENTS REQUESTS [STAGGER]
"""

import http.client
import json
import statistics
import sys
import threading
import time

PROMPT_LENGTHS = [16, 96, 32, 160, 8, 48, 128, 24]
OUTPUT_LENGTHS = [64, 192, 128, 32, 256, 96, 160, 48]


def workload(requests, vocab):
    """[(prompt ids, max_tokens)] in the order they are sent; deterministic."""
    out = []
    for k in range(requests):
        n = PROMPT_LENGTHS[k % len(PROMPT_LENGTHS)]
        prompt = [(k * 7919 + i * 104729) % (vocab - 3) + 3 for i in range(n)]
        out.append((prompt, OUTPUT_LENGTHS[(k * 3) % len(OUTPUT_LENGTHS)]))
    return out


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def one_request(port, model, prompt, max_tokens):
    """(ttft s, per-token s, completion tokens) of one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read())
    first = last = None
    tokens = 0
    for line in resp:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        elif chunk["choices"] and chunk["choices"][0]["text"]:
            last = time.perf_counter()
            first = first or last
    conn.close()
    assert tokens == max_tokens, f"{tokens} tokens, asked {max_tokens}"
    return first - start, (last - first) / max(1, tokens - 1), tokens


def main():
    port, model, clients, requests = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    stagger = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
    work = workload(requests, 4096)  # the shipped tokenizer's vocabulary, which the bench folder uses
    results, errors = [], []
    lock = threading.Lock()
    sent = [0]  # the next request of `work` to send

    def client(i):
        time.sleep(stagger * i)
        while True:
            with lock:
                if sent[0] == len(work):
                    return
                prompt, max_tokens = work[sent[0]]
                sent[0] += 1
            try:
                r = one_request(port, model, prompt, max_tokens)
            except Exception as e:  # reported at the end
                errors.append(repr(e))
                return
            with lock:
                results.append(r)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise SystemExit(f"serve_load: {len(errors)} requests failed: {errors[0]}")
    ttft = [r[0] for r in results]
    tpot = [r[1] for r in results]
    tokens = sum(r[2] for r in results)
    # The engine's side, from /metrics: forward passes, their time, and the new tokens each made on average.
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", "/metrics")
    m = dict(line.rsplit(" ", 1) for line in conn.getresponse().read().decode().splitlines() if line[:1] != "#")
    passes = float(m["ds_serve_forward_passes_total"])
    print(f"requests={len(results)} tokens={tokens} wall_s={wall:.2f} tok_s={tokens / wall:.1f} "
          f"pass_ms={float(m['ds_serve_busy_seconds_total']) / passes * 1e3:.2f} "
          f"tokens_per_pass={float(m['ds_serve_generated_tokens_total']) / passes:.2f} "
          f"ttft_p50_ms={percentile(ttft, 50) * 1e3:.1f} ttft_p99_ms={percentile(ttft, 99) * 1e3:.1f} "
          f"tpot_p50_ms={percentile(tpot, 50) * 1e3:.2f} tpot_p99_ms={percentile(tpot, 99) * 1e3:.2f} "
          f"mean_ttft_ms={statistics.mean(ttft) * 1e3:.1f}")


if __name__ == "__main__":
    main()
