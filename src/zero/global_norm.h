// The L2 norm of gradients held as partitions across ranks (ZeRO stages 1-3) or whole (stage 0): each rank sums the
// squares of its own tensors, one all-reduce combines them, so every rank takes the same clipping decision.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::zero {

// `group`: the ranks whose partitions make up the whole; null (or a group of one) when `grads` are whole already.
// Collective over `group`.
double global_norm(const std::vector<at::Tensor>& grads, comm::ProcessGroup* group);

}  // namespace deepspeed::zero
