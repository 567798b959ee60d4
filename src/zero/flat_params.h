// Flat parameter groups: each group's parameters live in one contiguous buffer (in the model's dtype), with every
// parameter a view into it (ARCHITECTURE.md "Flat buffers"). One buffer per group lets the optimizer run one fused
// kernel per group or partition, lets gradient buckets be plain ranges, and is the layout ZeRO partitions: with
// partitioning the buffer is padded so each data-parallel rank owns one equal, aligned slice.
//
// Gradients: stages 0 and 1 keep a full gradient buffer `grads_flat` with the same layout, fp32 or (with
// data_types.grad_accum_dtype the model's bf16/fp16) the model's dtype. When it is the parameters' dtype their .grad
// are views into it, so autograd accumulates in place; otherwise (a bf16/fp16 model accumulating in fp32) autograd's
// gradients are added into it by the gradient hooks. Stage 2 keeps no full buffer (see grad_reducer.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "deepspeed/comm.h"
#include "zero/partition.h"

namespace deepspeed::zero {

struct FlatGroup {
  std::vector<at::Tensor> params;      // the model's parameters, now views into `params_flat`
  std::vector<int64_t> offsets;        // element offset of each parameter (64-byte aligned) in the flat buffers
  at::Tensor params_flat;              // model dtype, contiguous, padded
  at::Tensor grads_flat;               // fp32 or the model's dtype, same layout; undefined at stage 2
  zero::PartitionLayout layout;        // this rank's slice; the whole buffer when not partitioned
  std::optional<double> lr;            // caller's override of the optimizer's lr
  std::optional<double> weight_decay;  // caller's override of the optimizer's weight decay
  // optimizer.type Muon: this group holds the matrices Newton-Schulz updates (the rest take its auxiliary Adam).
  bool use_muon = false;
  // The ranks holding copies of these parameters, over which their gradients are reduced and (ZeRO 1/2) their
  // buffer is partitioned. Null: the data-parallel group the engine (or flatten/reducer caller) passes. Set for MoE
  // experts, whose copies live on their expert-data-parallel group only (each expert-parallel rank holds others).
  comm::ProcessGroup group;

  int64_t numel() const { return params_flat.numel(); }
};

struct FlattenOptions {
  at::ScalarType dtype = at::kFloat;  // parameters are converted to it (bf16/fp16 for mixed precision)
  // Partition each buffer over its group's ranks (FlatGroup::group, else `group`); false: one whole buffer.
  bool partitioned = false;
  comm::ProcessGroup group;
  bool full_grads = true;             // allocate grads_flat (stages 0 and 1)
  at::ScalarType grad_dtype = at::kFloat;  // grads_flat's: fp32, or `dtype` (gradients accumulated in it)
};

// The ranks a group's copies live on: its own group, else `fallback`.
const comm::ProcessGroup& copies_group(const FlatGroup& group, const comm::ProcessGroup& fallback);

// Moves each group's parameters into a fresh flat buffer (values kept, converted to options.dtype) and points
// every parameter at a view of it; with full_grads in the parameters' dtype, .grad becomes a view of grads_flat.
// Parameters must be floating-point tensors requiring grad, each in at most one group; otherwise throws
// deepspeed::Error naming the offending parameter index.
void flatten_into(std::vector<FlatGroup>& groups, const FlattenOptions& options = {});

// True when autograd accumulates straight into grads_flat (a full gradient buffer in the parameters' dtype).
bool grads_are_views(const FlatGroup& group);

// Zeroes the full gradient buffers in place and re-attaches the views a user may have dropped.
void zero_grads(std::vector<FlatGroup>& groups);

// Re-attaches gradient views a user may have dropped (e.g. by assigning p.grad() = {}).
void ensure_grad_views(std::vector<FlatGroup>& groups);

}  // namespace deepspeed::zero
