// bench_generate: time to first token and decode tokens/s of deepspeed::init_inference + generate on a Hugging Face
// folder, measured as bench/inference/transformers_generate.py measures transformers' generate (the same prompts,
// settings and timing), so run_generate_bench.sh can print the two side by side.
//
//   [DS_KERNEL_INJECT=1] bench_generate MODEL_DIR BATCH PROMPT_TOKENS NEW_TOKENS REPEATS THREADS
//
// DS_KERNEL_INJECT=1: replace_with_kernel_inject (q/k/v and gate/up fused into one matmul each).
// Prompts: BATCH rows of PROMPT_TOKENS ids drawn with seed 0 (the same ids as the Python side: both read them from
// numpy-free arithmetic below). Greedy, no stop token (every row makes NEW_TOKENS). Time to first token: the median
// over REPEATS of generate with 1 new token; decode: (NEW_TOKENS - 1) x BATCH tokens over the median time of
// generate with NEW_TOKENS minus that. One warm-up of each first. Prints one line: "ttft_ms=... decode_tok_s=...".
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "deepspeed/inference/engine.h"

namespace {

namespace di = deepspeed::inference;

// Row r, position i: (r * 7919 + i * 104729) % (vocab - 3) + 3: the Python side computes the same.
std::vector<std::vector<int64_t>> prompts(int64_t batch, int64_t tokens, int64_t vocab) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t i = 0; i < tokens; ++i)
      out[static_cast<size_t>(r)].push_back((r * 7919 + i * 104729) % (vocab - 3) + 3);
  return out;
}

double median_seconds(di::InferenceEngine& engine, const std::vector<std::vector<int64_t>>& p,
                      const di::GenerationConfig& g, int repeats) {
  engine.generate(p, g);  // warm-up
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    engine.generate(p, g);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: bench_generate MODEL_DIR BATCH PROMPT_TOKENS NEW_TOKENS REPEATS THREADS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t batch = std::atoll(argv[2]), tokens = std::atoll(argv[3]), new_tokens = std::atoll(argv[4]);
  const int repeats = std::atoi(argv[5]);
  at::set_num_threads(std::atoi(argv[6]));
  di::InferenceConfig ic;
  ic.dtype = c10::ScalarType::Float;
  ic.max_out_tokens = tokens + new_tokens;
  const char* inject = std::getenv("DS_KERNEL_INJECT");
  ic.replace_with_kernel_inject = inject != nullptr && std::string(inject) == "1";
  auto engine = deepspeed::init_inference(dir, ic);
  const auto p = prompts(batch, tokens, engine.module()->config().vocab_size);
  di::GenerationConfig g;  // greedy, no stop token
  g.max_new_tokens = 1;
  const double first = median_seconds(engine, p, g, repeats);
  g.max_new_tokens = new_tokens;
  const double whole = median_seconds(engine, p, g, repeats);
  std::printf("ttft_ms=%.2f decode_tok_s=%.1f\n", first * 1e3,
              static_cast<double>((new_tokens - 1) * batch) / (whole - first));
  return 0;
}
