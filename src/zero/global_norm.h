// The L2 norm of gradients held as partitions across ranks (ZeRO stages 1-3) or whole (stage 0): each rank sums the
// squares of its own tensors, one all-reduce combines them, so every rank takes the same clipping decision.
//
// Squares are summed in double (as DeepSpeed sums per-parameter norms in double): a float32 norm() over one flat
// buffer of ~1M elements is already off by 1e-4 relative, and the error grows with the buffer, which would move the
// logged grad_norm and the clipping coefficient with the layout (stage, world size, bucket) instead of the model.
//
// Thread-safety: pure functions; global_norm is a collective over `group`.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::zero {

// Sum of squares of `t` (any floating dtype, any shape and strides), accumulated in double. Works through `t` in
// chunks, so the extra memory is one chunk of doubles, never a gradient-sized buffer.
double squared_norm(const at::Tensor& t);

// `group`: the ranks whose partitions make up the whole; null (or a group of one) when `grads` are whole already.
// Collective over `group`.
double global_norm(const std::vector<at::Tensor>& grads, comm::ProcessGroup* group);

}  // namespace deepspeed::zero
