// bench_ragged: what continuous batching buys (deepspeed/inference/ragged_engine.h). Eight requests of mixed prompt
// and output lengths on a random Llama-shaped model, served three ways on the same engine settings:
//   continuous -- all eight submitted at once: they share every forward pass (decodes plus SplitFuse prompt chunks);
//   serial     -- one at a time, each submitted when the previous one finished;
//   padded     -- generate() over the eight left-padded prompts as one static batch, run to the longest limit (only
//                 each request's own tokens counted as useful).
// Greedy, no stop token, so every request makes exactly its limit of tokens. Each mode once for warm-up, then the
// median of REPEATS timed runs.
// Prints per mode: useful tokens/s, time to first token and time between tokens (p50 / p99 over requests' tokens).
//
//   bench_ragged [SHAPE=small] [THREADS=1] [DTYPE=fp32] [BUDGET=256] [BLOCK=64] [REPEATS=3] [MODES=all]
//
// SHAPE: tiny (hidden 64, 2 layers, vocab 256), small (hidden 256, 4 layers, vocab 32000), medium (hidden 1024,
// 8 layers), 1b (Llama 3.2 1B's shape: hidden 2048, 16 layers, 32 / 8 heads, vocab 128256, tied). The model runs on
// the accelerator when there is one. BUDGET: max_ragged_batch_size; BLOCK: kv_block_size.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/inference/generate.h"
#include "deepspeed/inference/ragged_engine.h"
#include "deepspeed/models/llama.h"

namespace {

namespace dm = deepspeed::models;
namespace di = deepspeed::inference;
using Clock = std::chrono::steady_clock;

const std::vector<int64_t> kPromptLengths = {16, 96, 8, 48, 128, 24, 64, 32};
const std::vector<int64_t> kOutputLengths = {64, 24, 96, 48, 32, 80, 40, 56};

dm::LlamaConfig shape_config(const std::string& shape) {
  dm::LlamaConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 32000;
  c.max_position_embeddings = 4096;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  if (shape == "tiny") {
    c.hidden_size = 64, c.intermediate_size = 172, c.num_hidden_layers = 2, c.vocab_size = 256;
  } else if (shape == "small") {
    c.hidden_size = 256, c.intermediate_size = 688, c.num_hidden_layers = 4;
  } else if (shape == "medium") {
    c.hidden_size = 1024, c.intermediate_size = 2816, c.num_hidden_layers = 8;
    c.num_attention_heads = 16, c.num_key_value_heads = 4;
  } else if (shape == "1b") {
    c.hidden_size = 2048, c.intermediate_size = 8192, c.num_hidden_layers = 16, c.vocab_size = 128256;
    c.num_attention_heads = 32, c.num_key_value_heads = 8, c.tie_word_embeddings = true, c.rope_theta = 500000.0;
  } else {
    std::fprintf(stderr, "bench_ragged: unknown shape %s (tiny, small, medium, 1b)\n", shape.c_str());
    std::exit(2);
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

std::vector<di::ServeRequest> make_requests(int64_t vocab) {
  std::vector<di::ServeRequest> out(kPromptLengths.size());
  for (size_t r = 0; r < out.size(); ++r) {
    for (int64_t i = 0; i < kPromptLengths[r]; ++i)
      out[r].prompt.push_back((static_cast<int64_t>(r) * 7919 + i * 104729) % (vocab - 3) + 3);
    out[r].generation.max_new_tokens = kOutputLengths[r];  // greedy; no eos_token_id: every request runs its limit
  }
  return out;
}

struct Timings {
  double seconds = 0;
  int64_t tokens = 0;
  std::vector<double> first_token, between_tokens;  // seconds
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Submits `batch` (indices into requests) at once and steps until all are done, recording each token's time.
void serve_together(di::RaggedEngine& engine, const std::vector<di::ServeRequest>& requests,
                    const std::vector<size_t>& batch, Timings& t) {
  const auto start = Clock::now();
  std::vector<Clock::time_point> last(requests.size(), start);
  std::vector<bool> got_first(requests.size(), false);
  for (const size_t r : batch) {
    engine.submit(requests[r], [&, r](const di::TokenEvent&) {
      const auto now = Clock::now();
      const double since = std::chrono::duration<double>(now - last[r]).count();
      (got_first[r] ? t.between_tokens : t.first_token).push_back(since);
      got_first[r] = true;
      last[r] = now;
      ++t.tokens;
    });
  }
  while (engine.step()) {
  }
}

Timings run_ragged(di::RaggedEngine& engine, const std::vector<di::ServeRequest>& requests, bool serial) {
  Timings t;
  const auto start = Clock::now();
  if (serial) {
    for (size_t r = 0; r < requests.size(); ++r) serve_together(engine, requests, {r}, t);
  } else {
    std::vector<size_t> all(requests.size());
    for (size_t r = 0; r < all.size(); ++r) all[r] = r;
    serve_together(engine, requests, all, t);
  }
  deepspeed::accelerator::get_accelerator().synchronize();
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

// Static batching: one generate() over all prompts, run to the longest limit; only each request's own tokens count.
Timings run_padded(dm::LlamaForCausalLMImpl& model, const std::vector<di::ServeRequest>& requests) {
  std::vector<std::vector<int64_t>> prompts;
  int64_t useful = 0;
  for (const auto& r : requests) {
    prompts.push_back(r.prompt);
    useful += r.generation.max_new_tokens;
  }
  di::GenerationConfig g;
  g.max_new_tokens = *std::max_element(kOutputLengths.begin(), kOutputLengths.end());
  Timings t;
  const auto start = Clock::now();
  di::generate(model, prompts, g);
  deepspeed::accelerator::get_accelerator().synchronize();
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  t.tokens = useful;
  return t;
}

// One warm-up run, then the run of median time out of `repeats`.
template <typename F>
Timings median_of(int repeats, F run) {
  run();
  std::vector<Timings> runs;
  for (int i = 0; i < repeats; ++i) runs.push_back(run());
  std::sort(runs.begin(), runs.end(), [](const Timings& a, const Timings& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

void report(const char* mode, const Timings& t) {
  std::printf(
      "%-10s tokens=%lld seconds=%.3f tok_s=%.1f ttft_p50_ms=%.1f ttft_p99_ms=%.1f tpot_p50_ms=%.2f "
      "tpot_p99_ms=%.2f\n",
      mode, static_cast<long long>(t.tokens), t.seconds, static_cast<double>(t.tokens) / t.seconds,
      percentile(t.first_token, 0.5) * 1e3, percentile(t.first_token, 0.99) * 1e3,
      percentile(t.between_tokens, 0.5) * 1e3, percentile(t.between_tokens, 0.99) * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "small";
  at::set_num_threads(argc > 2 ? std::atoi(argv[2]) : 1);
  const std::string dtype = argc > 3 ? argv[3] : "fp32";
  di::RaggedEngineConfig c;
  c.max_ragged_batch_size = argc > 4 ? std::atoll(argv[4]) : 256;
  c.kv_block_size = argc > 5 ? std::atoll(argv[5]) : 64;
  const int repeats = std::max(1, argc > 6 ? std::atoi(argv[6]) : 3);
  c.dtype = dtype == "bf16" ? at::kBFloat16 : dtype == "fp16" ? at::kHalf : at::kFloat;
  c.max_context = 512;
  c.max_tracked_sequences = 16;
  c.max_ragged_sequence_count = 16;
  c.memory_mode = "allocate";
  c.memory_size = 16 * ((c.max_context + c.kv_block_size - 1) / c.kv_block_size);
  at::manual_seed(0);
  dm::LlamaForCausalLM model(shape_config(shape));
  di::RaggedEngine engine(model, c);  // casts and moves the model, fuses its projections
  const auto requests = make_requests(model->config().vocab_size);
  std::printf("shape=%s device=%s dtype=%s threads=%d budget=%lld block=%lld requests=%zu\n", shape.c_str(),
              deepspeed::accelerator::get_accelerator().device_name().c_str(), dtype.c_str(), at::get_num_threads(),
              static_cast<long long>(c.max_ragged_batch_size), static_cast<long long>(c.kv_block_size),
              requests.size());
  // MODES: a comma-separated subset of continuous,serial,padded (e.g. one of them alone under a profiler).
  const std::string modes = argc > 7 ? argv[7] : "continuous,serial,padded";
  auto wanted = [&](const char* m) { return modes.find(m) != std::string::npos; };
  Timings continuous, serial, padded;
  if (wanted("continuous")) {
    continuous = median_of(repeats, [&] { return run_ragged(engine, requests, false); });
    report("continuous", continuous);
  }
  if (wanted("serial")) {
    serial = median_of(repeats, [&] { return run_ragged(engine, requests, true); });
    report("serial", serial);
  }
  if (wanted("padded")) {
    padded = median_of(repeats, [&] { return run_padded(*model, requests); });
    report("padded", padded);
  }
  auto rate = [](const Timings& t) { return t.seconds > 0 ? static_cast<double>(t.tokens) / t.seconds : 0.0; };
  if (rate(serial) > 0 && rate(padded) > 0)
    std::printf("continuous/serial=%.2fx continuous/padded=%.2fx\n", rate(continuous) / rate(serial),
                rate(continuous) / rate(padded));
  return 0;
}
