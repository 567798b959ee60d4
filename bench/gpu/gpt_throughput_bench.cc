// Training throughput of the Engine against a plain LibTorch loop on the same GPT, in one process on one device:
//
//   build/bin/bench_gpt_throughput [--hidden 1024 --layers 24 --heads 16 --seq 1024 --vocab 50304 --micro 8]
//                                  [--stages 0,3 --steps 10 --warmup 3 --rounds 2]
//
// The defaults are the issue's ~350M-parameter GPT in bf16. (a) plain: the model in bf16 on the device,
// forward, backward, torch::optim::AdamW on the bf16 parameters, zero_grad; (b) ours: deepspeed::initialize with
// bf16, AdamW and zero_optimization.stage S (stage 3 with every block a unit), engine.forward / backward / step.
// Both see the same token batches. Blocks of --steps steps alternate (plain, ours, plain, ours, ...) so drift
// hits both; each block is timed between two device synchronizations. Model FLOPs per step follow Megatron's
// count without recomputation (bench_util.h), so TFLOP/s are model TFLOP/s, and the
// share of --peak_tflops (the H200's ~790 dense bf16 by default) is printed beside them. Runs on CPU too (tiny
// sizes), where the figures mean nothing but the code path is the same.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "bench_util.h"
#include "gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace acc = deepspeed::accelerator;

struct Options {
  int64_t hidden = 1024, layers = 24, heads = 16, seq = 1024, vocab = 50304, micro = 8;
  int steps = 10, warmup = 3, rounds = 2;
  std::string stages = "0,3";
  double peak_tflops = 790.0;
  bool tensor_op_steps = false;  // also run each stage with DS_CUDA_FUSED_STEPS=0
};

deepspeed::models::GPTConfig gpt_config(const Options& o, bool units) {
  deepspeed::models::GPTConfig c;
  c.vocab_size = o.vocab;
  c.seq_len = o.seq;
  c.layers = o.layers;
  c.hidden = o.hidden;
  c.heads = o.heads;
  c.tied_head = false;
  c.shard_blocks = units;
  return c;
}

// The token batches every side trains on, on the device.
std::vector<std::pair<at::Tensor, at::Tensor>> batches(const Options& o, int n, c10::Device device) {
  at::manual_seed(5);
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  for (int i = 0; i < n; ++i) {
    at::Tensor t = at::randint(o.vocab, {o.micro, o.seq + 1}, at::kLong).to(device);
    out.emplace_back(t.narrow(1, 0, o.seq), t.narrow(1, 1, o.seq));
  }
  return out;
}

// Seconds for `steps` calls of `step`, between two device synchronizations.
template <typename Step>
double timed(int steps, const Step& step) {
  acc::get_accelerator().synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) step(i);
  acc::get_accelerator().synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Adds the milliseconds `fn` takes, device work included, to `total`.
template <typename Fn>
void phase(double& total, const Fn& fn) {
  acc::get_accelerator().synchronize();
  const auto start = Clock::now();
  fn();
  acc::get_accelerator().synchronize();
  total += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Engine vs plain LibTorch training throughput on one device"};
  app.add_option("--hidden", o.hidden);
  app.add_option("--layers", o.layers);
  app.add_option("--heads", o.heads);
  app.add_option("--seq", o.seq);
  app.add_option("--vocab", o.vocab);
  app.add_option("--micro", o.micro);
  app.add_option("--steps", o.steps, "steps per timed block");
  app.add_option("--warmup", o.warmup);
  app.add_option("--rounds", o.rounds, "alternating blocks per side");
  app.add_option("--stages", o.stages, "ZeRO stages of the engine runs, comma separated");
  app.add_option("--peak_tflops", o.peak_tflops);
  app.add_flag("--tensor-op-steps", o.tensor_op_steps,
               "also run each stage with the tensor-op optimizer step instead of the fused CUDA one");
  CLI11_PARSE(app, argc, argv);

  deepspeed::comm::init_distributed();
  const c10::Device device = acc::get_accelerator().device();
  const double flops = deepspeed::bench::gpt_model_flops_per_step(gpt_config(o, false), o.micro);
  const auto data = batches(o, o.steps, device);

  // (a) the plain loop.
  deepspeed::models::GPT plain(gpt_config(o, false));
  plain->to(device, at::kBFloat16);
  torch::optim::AdamW plain_opt(plain->parameters(), torch::optim::AdamWOptions(1e-4));
  auto plain_step = [&](int i) {
    at::Tensor loss = plain->forward(data[i].first, data[i].second);
    loss.backward();
    plain_opt.step();
    plain_opt.zero_grad();
  };

  std::printf("device %s, GPT hidden %ld layers %ld heads %ld seq %ld vocab %ld micro %ld, %.1f GFLOP per step\n",
              device.str().c_str(), static_cast<long>(o.hidden), static_cast<long>(o.layers),
              static_cast<long>(o.heads), static_cast<long>(o.seq), static_cast<long>(o.vocab),
              static_cast<long>(o.micro), flops / 1e9);
  std::printf("%-26s %12s %10s %10s %14s\n", "run", "s/step", "TFLOP/s", "of peak", "vs plain loop");
  std::vector<std::pair<int, bool>> runs;  // (stage, fused optimizer step)
  std::stringstream stages(o.stages);
  for (std::string stage_text; std::getline(stages, stage_text, ',');) {
    runs.emplace_back(std::stoi(stage_text), true);
    if (o.tensor_op_steps) runs.emplace_back(std::stoi(stage_text), false);
  }
  for (const auto& [stage, fused] : runs) {
    // Only for the A/B: otherwise a user's DS_CUDA_FUSED_STEPS stands (and a build without the kernels runs the
    // tensor-op step under the plain label: ds_report says which build this is).
    if (o.tensor_op_steps) setenv("DS_CUDA_FUSED_STEPS", fused ? "1" : "0", 1);
    deepspeed::models::GPT model(gpt_config(o, stage == 3));
    const std::string json = "{\"train_micro_batch_size_per_gpu\": " + std::to_string(o.micro) +
                             ", \"bf16\": {\"enabled\": true}, \"steps_per_print\": 1000000, "
                             "\"gradient_clipping\": 0, "  // the plain loop it is timed against does not clip
                             "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.0001}}, "
                             "\"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}";
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
    auto engine_step = [&](int i) {
      at::Tensor loss = engine.forward(data[i].first, data[i].second);
      engine.backward(loss);
      engine.step();
    };
    timed(o.warmup, plain_step);
    timed(o.warmup, engine_step);
    double plain_s = 0, ours_s = 0;
    for (int r = 0; r < o.rounds; ++r) {
      plain_s += timed(o.steps, plain_step);
      ours_s += timed(o.steps, engine_step);
    }
    const int n = o.steps * o.rounds;
    const std::string name = "stage " + std::to_string(stage) + (fused ? "" : " tensor-op step");
    for (const auto& [label, secs] : {std::pair<std::string, double>{"plain", plain_s}, {name, ours_s}}) {
      const double per_step = secs / n, tflops = flops / per_step / 1e12;
      std::printf("%-26s %12.4f %10.1f %9.1f%% %13.3fx\n", label.c_str(), per_step, tflops,
                  100.0 * tflops / o.peak_tflops, plain_s / secs);
    }
    // Where the time goes: one more block of each side with a device synchronization after every phase (slower
    // than the blocks above, which let the phases overlap; milliseconds per step).
    double plain_ms[3] = {0, 0, 0}, ours_ms[3] = {0, 0, 0};
    for (int i = 0; i < o.steps; ++i) {
      at::Tensor loss;
      phase(plain_ms[0], [&] { loss = plain->forward(data[i].first, data[i].second); });
      phase(plain_ms[1], [&] { loss.backward(); });
      phase(plain_ms[2], [&] {
        plain_opt.step();
        plain_opt.zero_grad();
      });
      phase(ours_ms[0], [&] { loss = engine.forward(data[i].first, data[i].second); });
      phase(ours_ms[1], [&] { engine.backward(loss); });
      phase(ours_ms[2], [&] { engine.step(); });
    }
    std::printf("  phases, ms per step (forward / backward / step): plain %.1f / %.1f / %.1f, %s %.1f / %.1f / "
                "%.1f\n",
                plain_ms[0] / o.steps, plain_ms[1] / o.steps, plain_ms[2] / o.steps, name.c_str(),
                ours_ms[0] / o.steps, ours_ms[1] / o.steps, ours_ms[2] / o.steps);
  }
  return 0;
}
