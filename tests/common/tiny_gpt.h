// Shared by the multi-rank engine and ZeRO tests: a tiny reference GPT, a fixed random token dataset, and a
// training loop that feeds an Engine the micro-batches DataParallelSampler assigns to this rank.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"
#include "tolerance.h"

namespace tiny_gpt {

constexpr int64_t kSamples = 64;
constexpr uint64_t kDataSeed = 5;

// `uneven`: odd sizes, so no flat buffer splits evenly over 2, 3 or 4 ranks.
inline deepspeed::models::GPTConfig config(bool uneven = false) {
  deepspeed::models::GPTConfig c;
  c.vocab_size = uneven ? 61 : 64;
  c.seq_len = uneven ? 13 : 16;
  c.layers = 2;
  c.hidden = uneven ? 24 : 32;
  c.heads = uneven ? 3 : 4;
  // No Linear biases: the attention's key bias has a zero true gradient, and Adam, Adagrad and Lion would turn
  // its rounding noise into full-size updates that no two implementations share (see gpt.h).
  c.bias = false;
  return c;
}

inline at::Tensor dataset(const deepspeed::models::GPTConfig& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  return at::randint(c.vocab_size, {kSamples, c.seq_len + 1}, gen, at::kLong);
}

// Tests that ask the comm layer for ranks before creating an engine start it themselves, so each test also runs
// alone (--gtest_filter).
inline void ensure_comm() {
  if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
}

// The bound for two layouts of the same training (a ZeRO stage against stage 0, say): at one rank no sum crosses
// ranks and every layout adds in the same order, so bit equality; at more ranks `bound`.
inline double bound_at_this_world(double bound) {
  ensure_comm();
  return deepspeed::comm::get_world_size() == 1 ? tolerance::exact() : bound;
}

// Parameters of one transformer block of a GPT without Linear biases (config()'s): two norms, attention, MLP.
inline int64_t block_elements(const deepspeed::models::GPTConfig& c) {
  const int64_t h = c.hidden;
  return 2 * (2 * h) + h * 3 * h + h * h + h * 4 * h + 4 * h * h;
}

inline deepspeed::models::GPT make_model(const deepspeed::models::GPTConfig& c) {
  at::manual_seed(77);
  return deepspeed::models::GPT(c);
}

inline void split_batch(const at::Tensor& data, const std::vector<int64_t>& idx, at::Tensor* x, at::Tensor* y) {
  at::Tensor batch = data.index_select(0, at::tensor(idx, at::kLong));
  const int64_t seq = data.size(1) - 1;
  *x = batch.narrow(1, 0, seq);
  *y = batch.narrow(1, 1, seq);
}

// Trains `steps` optimizer steps of this rank's share of each global batch, starting at global step `first_step`
// (a resumed run continues where the data left off). Returns this rank's loss of each micro-batch; `grad_norms`,
// when given, gets the engine's global gradient norm after each step.
inline std::vector<double> train(deepspeed::Engine& engine, const at::Tensor& data, int steps, int first_step = 0,
                                 std::vector<double>* grad_norms = nullptr) {
  deepspeed::DataParallelSampler sampler(data.size(0), engine.train_micro_batch_size_per_gpu(),
                                         engine.gradient_accumulation_steps(), engine.global_rank(),
                                         engine.world_size(), kDataSeed);
  std::vector<double> losses;
  for (int step = first_step; step < first_step + steps; ++step) {
    for (int64_t m = 0; m < engine.gradient_accumulation_steps(); ++m) {
      at::Tensor x, y;
      split_batch(data, sampler.micro_batch(step, m), &x, &y);
      at::Tensor loss = engine.forward(x.to(engine.device()), y.to(engine.device()));
      losses.push_back(loss.item<double>());
      engine.backward(loss);
      engine.step();
    }
    if (grad_norms) grad_norms->push_back(engine.get_global_grad_norm());
  }
  return losses;
}

inline std::vector<at::Tensor> snapshot(const deepspeed::models::GPT& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().to(at::kCPU, at::kFloat, false, /*copy=*/true));
  return out;
}

// Largest per-tensor relative L2 error of `got` against `want`.
inline double max_relative_error(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double err = (got[i] - want[i]).norm().item<double>() / (want[i].norm().item<double>() + 1e-12);
    worst = err > worst ? err : worst;
  }
  return got.size() == want.size() ? worst : 1e300;
}

// The plain single-process LibTorch run an engine at `world` ranks must reproduce: the same model and initial
// values, each step's whole global batch (every rank's micro-batches) in one forward, torch's own clipping and
// optimizer. No code of ours runs in it but the model and the sampler that picks the samples.
struct Reference {
  std::vector<at::Tensor> params;   // after the last step
  std::vector<double> grad_norms;   // each step's global gradient norm before clipping, summed in double
};

// `make_step(params)` returns the optimizer step to run after each backward (e.g. sgd_step below).
using ReferenceStep = std::function<void()>;
using MakeReferenceStep = std::function<ReferenceStep(std::vector<at::Tensor>& params)>;

inline Reference train_reference(const deepspeed::models::GPTConfig& c, int world, int64_t micro, int64_t gas,
                                 int steps, double clip, const MakeReferenceStep& make_step) {
  deepspeed::models::GPT model = make_model(c);
  const c10::Device device = deepspeed::accelerator::get_accelerator().device();  // where the engine trains too
  model->to(device);
  const at::Tensor data = dataset(c);
  std::vector<at::Tensor> params = model->parameters();
  ReferenceStep step_fn = make_step(params);
  deepspeed::DataParallelSampler sampler(data.size(0), micro * gas * world, 1, 0, 1, kDataSeed);
  Reference out;
  for (int step = 0; step < steps; ++step) {
    for (auto& p : params) p.mutable_grad() = at::Tensor();
    at::Tensor x, y;
    split_batch(data, sampler.global_batch(step), &x, &y);
    model->forward(x.to(device), y.to(device)).backward();
    double sq = 0;
    for (const auto& p : params) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
    out.grad_norms.push_back(std::sqrt(sq));
    if (clip > 0) torch::nn::utils::clip_grad_norm_(params, clip);
    step_fn();
  }
  for (const auto& p : params) out.params.push_back(p.detach().to(at::kCPU, at::kFloat, false, /*copy=*/true));
  return out;
}

// torch's SGD without momentum; weight_decay > 0 adds L2 (weight_decay * p to the gradient), as DeepSpeed's SGD does.
inline MakeReferenceStep sgd_step(double lr, double weight_decay = 0.0) {
  return [lr, weight_decay](std::vector<at::Tensor>& params) -> ReferenceStep {
    auto opt = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).weight_decay(weight_decay));
    return [opt] { opt->step(); };
  };
}

// The config's optimizer section for the same SGD.
inline std::string sgd_json(double lr, double weight_decay = 0.0) {
  return "{\"type\": \"SGD\", \"params\": {\"lr\": " + std::to_string(lr) +
         ", \"weight_decay\": " + std::to_string(weight_decay) + "}}";
}

}  // namespace tiny_gpt
