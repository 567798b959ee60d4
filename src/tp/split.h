// How the tensor-parallel layers split a dimension over their group (shared by parallel_linear.cc and
// vocab_parallel.cc).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "deepspeed/comm.h"

namespace deepspeed::tp {

// `layer`: this rank must be in `group` and `count` (what `counted` names, e.g. "output features") must divide by
// its size; errors name both numbers.
void check_splits(int64_t count, const comm::ProcessGroup& group, const char* layer, const char* counted);

// This rank's slice [rank * n / T, (rank + 1) * n / T) of dimension `dim` of `t` (of each of `fused_parts` equal
// blocks along it: partition.h's slice_split), copied and detached.
at::Tensor slice_of(const at::Tensor& t, int64_t dim, const comm::ProcessGroup& group, int64_t fused_parts = 1);

}  // namespace deepspeed::tp
