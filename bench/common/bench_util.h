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
