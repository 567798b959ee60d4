// DeepSpeed-Ulysses sequence parallelism: each of P ranks holds seq/P tokens of every sequence; around attention two
// all-to-alls swap that for all tokens of heads/P heads, so attention runs locally on whole sequences, and swap it
// back.
//
//   q, k, v [batch, seq/P, heads, head_dim] (this rank's tokens, all heads)
//     -> all-to-all (scatter heads, gather sequence) -> [batch, seq, heads/P, head_dim]
//     -> the local attention (any function of q, k, v: causal masking sees the whole sequence, in order)
//     -> all-to-all (scatter sequence, gather heads) -> [batch, seq/P, heads, head_dim]
//
// Gradients flow through both all-to-alls (each one's backward is the other). Every other layer of the model works on
// its own tokens with whole weights, so to the engine the P ranks look like data-parallel replicas: gradients average
// over them (and over the data-parallel ranks), which averages the per-rank mean losses into the mean over all tokens
// of the global batch. Train with the config's `sequence_parallel_size` P; the engine checks the model's layers use
// groups of that size.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>

#include "deepspeed/comm.h"

namespace deepspeed::sequence {

struct SequenceParallelGroups {
  int sp_size = 1;
  comm::ProcessGroup sequence_parallel;  // this rank's P consecutive ranks (null at sp_size 1)
  comm::ProcessGroup data_parallel;      // the ranks holding this rank's part of their sequences (the world at 1)
};

// Made once per world and sp_size (collective the first time: every rank asks, in the same order). sp_size must
// divide the world size; the error names both.
SequenceParallelGroups sequence_parallel_groups(int sp_size);

// The all-to-all of Ulysses as an autograd function: `x`'s dimension `scatter_dim` is split into P chunks, chunk j sent
// to group rank j, and the chunks received are concatenated along `gather_dim` in group-rank order. Backward is the
// inverse exchange. `scatter_dim`'s size must divide by P (the error names both).
at::Tensor seq_all_to_all(const at::Tensor& x, const comm::ProcessGroup& group, int64_t scatter_dim,
                          int64_t gather_dim);

// Attention on whole sequences for some heads: q, k, v [batch, seq, heads/P, head_dim] -> [batch, seq, heads/P, dim].
using LocalAttention = std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v)>;

class DistributedAttentionImpl : public torch::nn::Module {
 public:
  // DeepSpeed's DistributedAttention(local_attention, sequence_process_group, scatter_idx, gather_idx), for
  // batch-first tensors: heads at dimension 2, the sequence at 1.
  DistributedAttentionImpl(LocalAttention local_attention, comm::ProcessGroup group, int64_t scatter_idx = 2,
                           int64_t gather_idx = 1);
  // q, k, v [batch, seq/P, heads, head_dim]; heads not divisible by P is an error naming both numbers.
  at::Tensor forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
  const comm::ProcessGroup& group() const { return group_; }

 private:
  LocalAttention local_;
  comm::ProcessGroup group_;
  int64_t scatter_idx_, gather_idx_;
};
TORCH_MODULE(DistributedAttention);

}  // namespace deepspeed::sequence
