// Shared by the multi-rank engine and ZeRO tests: a tiny reference GPT, a fixed random token dataset, and a
// training loop that feeds an Engine the micro-batches DataParallelSampler assigns to this rank.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/data.h"
#include "deepspeed/deepspeed.h"
#include "gpt.h"

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
// (a resumed run continues where the data left off). Returns this rank's loss of each micro-batch.
inline std::vector<double> train(deepspeed::Engine& engine, const at::Tensor& data, int steps, int first_step = 0) {
  deepspeed::DataParallelSampler sampler(data.size(0), engine.train_micro_batch_size_per_gpu(),
                                         engine.gradient_accumulation_steps(), engine.global_rank(),
                                         engine.world_size(), kDataSeed);
  std::vector<double> losses;
  for (int step = first_step; step < first_step + steps; ++step) {
    for (int64_t m = 0; m < engine.gradient_accumulation_steps(); ++m) {
      at::Tensor x, y;
      split_batch(data, sampler.micro_batch(step, m), &x, &y);
      at::Tensor loss = engine.forward(x, y);
      losses.push_back(loss.item<double>());
      engine.backward(loss);
      engine.step();
    }
  }
  return losses;
}

inline std::vector<at::Tensor> snapshot(const deepspeed::models::GPT& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().to(at::kFloat).clone());
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

}  // namespace tiny_gpt
