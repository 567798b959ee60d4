// Where the first inf or NaN of a gradient sits: the engine names the parameter that overflowed (fp16 loss
// scaling skips the step and says which gradient did it).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace deepspeed::zero {

// The index of the first inf or NaN element of `grads` in flat (row-major) order, or -1 when all
// are finite. Floating-point tensors only (fp32, fp64, fp16, bf16); integer tensors are always
// finite. Contiguous CPU tensors take a branch-light bit-pattern scan; anything else (strided,
// other devices) goes through ATen ops. The stages call this on their gradient buffers.
int64_t first_nonfinite(const at::Tensor& grads);

}  // namespace deepspeed::zero
