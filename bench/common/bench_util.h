// Small pieces the multi-rank benchmark drivers share: the reference model the issues quote DeepSpeed and DDP
// figures for, wall-clock helpers, and a per-element maximum across ranks.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <vector>

#include "deepspeed/comm.h"
#include "gpt.h"

namespace deepspeed::bench {

// The reference GPT: vocab 4096, hidden 384, 6 layers, 6 heads, seq 128, untied head: 13.8M parameters.
inline models::GPTConfig reference_gpt() {
  models::GPTConfig m;
  m.vocab_size = 4096;
  m.hidden = 384;
  m.layers = 6;
  m.heads = 6;
  m.seq_len = 128;
  m.tied_head = false;
  return m;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Model FLOPs of one training step of `m` on `micro` sequences, Megatron's count without recomputation:
// 72 B s L h^2 (1 + s / (6 h) + V / (12 L h)). Model TFLOP/s divide it by the step time.
inline double gpt_model_flops_per_step(const models::GPTConfig& m, int64_t micro) {
  const double B = static_cast<double>(micro), s = static_cast<double>(m.seq_len);
  const double L = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double V = static_cast<double>(m.vocab_size);
  return 72.0 * B * s * L * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * L * h));
}

// Element-wise maximum over ranks: a data-parallel step is as slow as its slowest rank, and memory is sized for
// the largest rank.
inline void max_over_ranks(std::vector<double>& v) {
  if (v.empty() || comm::get_world_size() == 1) return;
  at::Tensor t = at::tensor(v, at::kDouble);
  comm::get_world_group().all_reduce(t, comm::ReduceOp::kMax);
  auto acc = t.accessor<double, 1>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = acc[static_cast<int64_t>(i)];
}

}  // namespace deepspeed::bench
