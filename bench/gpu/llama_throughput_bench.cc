// Training throughput and model FLOP utilisation of the Llama family on one device:
//
//   build/bin/bench_llama_throughput [--hidden 2048 --intermediate 8192 --layers 16 --heads 32 --kv_heads 8
//                                     --vocab 128256 --seq 2048 --micro 4] [--stages 0,3 --steps 10 --warmup 3]
//                                    [--peak_tflops 989]
//
// The defaults are Llama 3.2 1B's shape (tied embeddings, llama3 rope scaling; 1.24B parameters) from random
// weights, bf16 with fp32 masters, AdamW, one rank: deepspeed::initialize at each ZeRO stage of --stages (stage 3
// with each decoder layer a unit), then forward / backward / step on random tokens. A block of --steps steps is
// timed between two device synchronizations, after --warmup untimed steps.
//
// Model FLOPs per token: 6 N + 12 L H Q T, the count torchtitan and PaLM's MFU use: N the parameters the tokens go
// through as matrix products (every parameter but an untied input embedding: a tied embedding is the head's
// matrix), L layers, H attention heads of width Q, T the sequence length (attention's two matrix products, forward
// and backward, not halved for the causal mask). MFU = model FLOP/s over --peak_tflops (H100 and H200 SXM: 989
// dense bf16 TFLOP/s). The device allocator's peak per stage is printed beside it. Runs on CPU at small sizes (the
// code path; the figures mean nothing there).
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/zero.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace acc = deepspeed::accelerator;
namespace dm = deepspeed::models;

struct Options {
  int64_t hidden = 2048, intermediate = 8192, layers = 16, heads = 32, kv_heads = 8, vocab = 128256;
  int64_t seq = 2048, micro = 4;
  int steps = 10, warmup = 3;
  std::string stages = "0,3";
  double peak_tflops = 989.0;
};

// Llama 3.2 1B's config.json with the shape of `o`.
std::string config_json(const Options& o) {
  std::ostringstream s;
  s << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": )"
    << o.hidden << R"(, "intermediate_size": )" << o.intermediate << R"(, "num_hidden_layers": )" << o.layers
    << R"(, "num_attention_heads": )" << o.heads << R"(, "num_key_value_heads": )" << o.kv_heads
    << R"(, "vocab_size": )" << o.vocab
    << R"(, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
      "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "torch_dtype": "bfloat16"})";
  return s.str();
}

// 6 N + 12 L H Q T per token (see the top of the file).
double flops_per_token(const dm::LlamaConfig& c, int64_t seq) {
  const double n = static_cast<double>(c.num_parameters() - (c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size));
  return 6.0 * n + 12.0 * static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim * seq);
}

double timed(int steps, const std::function<void(int)>& step) {
  acc::get_accelerator().synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step(i);
  acc::get_accelerator().synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Llama-family training throughput and MFU on one device"};
  app.add_option("--hidden", o.hidden);
  app.add_option("--intermediate", o.intermediate);
  app.add_option("--layers", o.layers);
  app.add_option("--heads", o.heads);
  app.add_option("--kv_heads", o.kv_heads);
  app.add_option("--vocab", o.vocab);
  app.add_option("--seq", o.seq);
  app.add_option("--micro", o.micro);
  app.add_option("--steps", o.steps, "timed steps per stage");
  app.add_option("--warmup", o.warmup, "untimed steps first");
  app.add_option("--stages", o.stages, "ZeRO stages, comma separated");
  app.add_option("--peak_tflops", o.peak_tflops, "the device's dense bf16 peak");
  CLI11_PARSE(app, argc, argv);

  deepspeed::comm::init_distributed();
  auto& device_acc = acc::get_accelerator();
  const c10::Device device = device_acc.device();
  const dm::LlamaConfig base = dm::LlamaConfig::from_json(config_json(o), "bench_llama_throughput's config");
  const double tokens = static_cast<double>(o.micro * o.seq);
  const double flops = flops_per_token(base, o.seq) * tokens;
  at::manual_seed(5);
  std::vector<std::pair<at::Tensor, at::Tensor>> data;
  for (int i = 0; i < o.steps; ++i) {
    at::Tensor t = at::randint(o.vocab, {o.micro, o.seq + 1}, at::kLong).to(device);
    data.emplace_back(t.narrow(1, 0, o.seq), t.narrow(1, 1, o.seq));
  }
  std::printf(
      "device %s, Llama hidden %lld intermediate %lld layers %lld heads %lld/%lld vocab %lld: %.1fM "
      "parameters; seq %lld micro %lld, %.1f TFLOP per step (6N + 12LHQT)\n",
      device.str().c_str(), static_cast<long long>(o.hidden), static_cast<long long>(o.intermediate),
      static_cast<long long>(o.layers), static_cast<long long>(o.heads), static_cast<long long>(o.kv_heads),
      static_cast<long long>(o.vocab), static_cast<double>(base.num_parameters()) / 1e6, static_cast<long long>(o.seq),
      static_cast<long long>(o.micro), flops / 1e12);
  std::printf("%-8s %10s %12s %10s %8s %16s\n", "stage", "s/step", "tokens/s", "TFLOP/s", "MFU", "peak alloc GiB");
  std::stringstream stages(o.stages);
  for (std::string stage_text; std::getline(stages, stage_text, ',');) {
    const int stage = std::stoi(stage_text);
    const std::string json = R"({"train_micro_batch_size_per_gpu": )" + std::to_string(o.micro) +
                             R"(, "bf16": {"enabled": true}, "steps_per_print": 1000000, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.0001, "weight_decay": 0.1}},
        "zero_optimization": {"stage": )" +
                             std::to_string(stage) + "}}";
    const auto config = deepspeed::Config::from_string(json);
    dm::LlamaConfig cfg = base;
    cfg.shard_layers = stage == 3;
    device_acc.reset_peak_memory_stats();
    double seconds = 0;
    {
      dm::LlamaForCausalLM model = [&] {
        deepspeed::zero::Init init(config);
        return dm::LlamaForCausalLM(cfg);
      }();
      auto engine = deepspeed::initialize(model, config);
      auto step = [&](int i) {
        const auto& [x, y] = data[static_cast<size_t>(i % o.steps)];
        at::Tensor loss = engine.forward(x, y);
        engine.backward(loss);
        engine.step();
      };
      timed(o.warmup, step);
      seconds = timed(o.steps, step) / o.steps;
    }
    const double peak_gib = static_cast<double>(device_acc.memory_stats().peak_allocated_bytes) / (1 << 30);
    const double tflops = flops / seconds / 1e12;
    std::printf("%-8d %10.4f %12.0f %10.1f %7.1f%% %16.2f\n", stage, seconds, tokens / seconds, tflops,
                100.0 * tflops / o.peak_tflops, peak_gib);
    std::fflush(stdout);
  }
  return 0;
}
