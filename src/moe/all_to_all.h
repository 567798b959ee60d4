// A differentiable all-to-all over an expert-parallel group: the MoE layer's dispatch of tokens to
// the ranks holding their experts and the return of the experts' outputs. Backward is the same
// exchange in reverse (an all-to-all of the gradients), so autograd carries gradients across ranks
// as DeepSpeed's _AllToAll does.
#pragma once

#include <ATen/core/Tensor.h>

#include "deepspeed/comm.h"

namespace deepspeed::moe {

// x: [group size * n, ...]; block i of dim 0 goes to group rank i; the result's block i came from
// group rank i. The autograd graph keeps its own handle of `group` (a backward may run after the
// caller's handle is gone). Collective over `group`, in forward and again in backward.
at::Tensor all_to_all(const at::Tensor& x, const comm::ProcessGroup& group);

}  // namespace deepspeed::moe
