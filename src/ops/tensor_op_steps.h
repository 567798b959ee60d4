// The optimizer steps as ATen tensor operations, for tensors the CPU kernels cannot touch (a GPU's fp32 masters
// when the optimizer is not offloaded). Same scalars, same operation order and one rounding per operation as the
// kernels (compiled without FMA contraction): states and square-root-free updates agree with the kernels bit for
// bit; Adam's and Adagrad's parameters to the square root's rounding (ATen's vectorized CPU sqrt is within one
// ulp; a GPU's sqrtf is correctly rounded like the kernels'). Test: TensorOpSteps.MatchTheKernels. Each op is one elementwise pass; the
// step holds up to three temporaries the size of the tensor.
//
// Inputs are validated by the public step functions (cpu_optimizer.h); `param_copy`, when defined, is a bf16 or
// fp16 tensor on param's device that receives the updated param rounded to its dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include "ops/optimizer_kernels.h"

namespace deepspeed::ops::detail {

// Throws unless `param_copy` is a bf16 or fp16 tensor of param's numel on param's device.
void check_param_copy(const at::Tensor& param_copy, const at::Tensor& param);

void adam_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                     const AdamScalars& s, const at::Tensor& param_copy);
// `momentum_buffer` is unused (may be undefined) when s.momentum == 0.
void sgd_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor momentum_buffer, const SgdScalars& s,
                    const at::Tensor& param_copy);
void adagrad_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor sum, const AdagradScalars& s,
                        const at::Tensor& param_copy);
void lion_tensor_ops(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, const LionScalars& s,
                     const at::Tensor& param_copy);

}  // namespace deepspeed::ops::detail
