// Flat parameter groups: each group's parameters live in one contiguous fp32 buffer and their gradients in
// another, with every parameter and its .grad a view into them (ARCHITECTURE.md "Flat buffers"). One buffer per
// group lets the optimizer run one fused kernel per group, lets gradient buckets be plain ranges to all-reduce,
// and is the layout ZeRO partitions later.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace deepspeed::runtime {

struct FlatGroup {
  std::vector<at::Tensor> params;  // the model's parameters, now views into `params_flat`
  std::vector<int64_t> offsets;    // element offset of each parameter (64-byte aligned) in the flat buffers
  at::Tensor params_flat;          // fp32, contiguous
  at::Tensor grads_flat;           // fp32, contiguous, same layout; each param's .grad views it
  std::optional<double> lr;            // caller's override of the optimizer's lr
  std::optional<double> weight_decay;  // caller's override of the optimizer's weight decay

  int64_t numel() const { return params_flat.numel(); }
};

// Moves each group's parameters into a fresh flat buffer (values preserved) and points every parameter and its
// gradient at views of the group's buffers. Parameters must be fp32 CPU/device tensors requiring grad, each in
// at most one group. Throws deepspeed::Error naming the offending parameter index otherwise.
void flatten_into(std::vector<FlatGroup>& groups);

// Zeroes every gradient in place (the views stay attached, so autograd keeps accumulating into the buffers).
void zero_grads(std::vector<FlatGroup>& groups);

// Re-attaches gradient views a user may have dropped (e.g. by assigning p.grad() = {}).
void ensure_grad_views(std::vector<FlatGroup>& groups);

}  // namespace deepspeed::runtime
