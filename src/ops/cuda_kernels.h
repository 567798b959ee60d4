// Fused optimizer steps as CUDA kernels, for fp32 masters on a GPU (cuda_kernels.cu, compiled by nvcc in every CUDA
// build unless DS_CUDA_KERNELS=OFF: DS_WITH_CUDA_KERNELS). The tensor-op steps (tensor_op_steps.h) make one pass
// over memory per operation, about sixteen for Adam; the fused step reads each element once and writes it once,
// which is the whole cost of a memory-bound update. Same scalars and the same operation order as the CPU kernels
// (optimizer_kernels.cc), compiled without multiply-add contraction, with IEEE division and square root: finite
// results agree with the CPU kernels bit for bit (test: FusedCudaSteps.AdamMatchesTheKernelsBitForBit, on a GPU; a
// NaN may come out with another payload).
//
// Plain pointers and scalars only, so that nvcc never parses LibTorch; cuda_steps.cc adapts tensors to it.
#pragma once

#include <cstdint>

namespace deepspeed::ops::detail {

enum class CopyDtype : int { kNone = 0, kBFloat16 = 1, kHalf = 2 };

struct CudaAdamArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  void* copy;  // n bf16 or fp16 elements receiving the updated p rounded to nearest even, or null
  CopyDtype copy_dtype;
  int64_t n;
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, inv_sqrt_bc2, l2, decay;
  bool first;
};

// Enqueues the step on `stream` (a cudaStream_t) of the current device; returns null, or CUDA's message when the
// launch failed (no kernel image for this GPU, say).
const char* launch_fused_adam(const CudaAdamArgs& args, void* stream);

}  // namespace deepspeed::ops::detail
