// The fused CUDA optimizer steps (cuda_kernels.h) behind the public step functions (cpu_optimizer.h): for tensors on
// a CUDA device, when this build compiled the kernels. Otherwise, or with DS_CUDA_FUSED_STEPS=0 in the environment
// (exactly "0": a switch for benchmarks and bisecting), GPU tensors take the tensor-op steps (tensor_op_steps.h);
// both agree with the CPU kernels bit for bit on finite values.
#pragma once

#include <ATen/core/Tensor.h>

#include "ops/optimizer_kernels.h"

namespace deepspeed::ops::detail {

// True when this build has the kernels and the environment does not turn them off (read at each call).
bool fused_cuda_steps_enabled();

// Adam on contiguous fp32 tensors of one CUDA device (validated by adam_step), on the device's current stream.
// `param_copy` is undefined or a contiguous bf16/fp16 tensor of param's numel on that device.
void adam_fused_cuda(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                     const AdamScalars& s, const at::Tensor& param_copy);

}  // namespace deepspeed::ops::detail
