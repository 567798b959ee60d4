// See cuda_kernels.h. Compiled with --fmad=false (src/ops/CMakeLists.txt): every a * b + c rounds twice, as in
// the CPU kernels; nvcc's default division and square root (-prec-div, -prec-sqrt) are correctly rounded.
#include "ops/cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace deepspeed::ops::detail {
namespace {

constexpr int kThreads = 256;

template <bool kFirst, CopyDtype kCopy>
__global__ void fused_adam_kernel(CudaAdamArgs a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    const float pi = a.p[i];
    const float gi = a.g[i] + a.l2 * pi;
    const float mi = (kFirst ? 0.0f : a.m[i] * a.beta1) + a.one_minus_beta1 * gi;
    const float vi = (kFirst ? 0.0f : a.v[i] * a.beta2) + a.one_minus_beta2 * gi * gi;
    const float denom = sqrtf(vi) * a.inv_sqrt_bc2 + a.eps;
    const float out = pi * a.decay - a.step_size * (mi / denom);
    a.p[i] = out;
    a.m[i] = mi;
    a.v[i] = vi;
    if constexpr (kCopy == CopyDtype::kBFloat16) {
      static_cast<__nv_bfloat16*>(a.copy)[i] = __float2bfloat16_rn(out);
    } else if constexpr (kCopy == CopyDtype::kHalf) {
      static_cast<__half*>(a.copy)[i] = __float2half_rn(out);
    }
  }
}

template <bool kFirst>
void launch(const CudaAdamArgs& a, int blocks, cudaStream_t stream) {
  switch (a.copy_dtype) {
    case CopyDtype::kNone:
      fused_adam_kernel<kFirst, CopyDtype::kNone><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case CopyDtype::kBFloat16:
      fused_adam_kernel<kFirst, CopyDtype::kBFloat16><<<blocks, kThreads, 0, stream>>>(a);
      break;
    case CopyDtype::kHalf:
      fused_adam_kernel<kFirst, CopyDtype::kHalf><<<blocks, kThreads, 0, stream>>>(a);
      break;
  }
}

}  // namespace

const char* launch_fused_adam(const CudaAdamArgs& args, void* stream) {
  if (args.n == 0) return nullptr;
  // Enough blocks to fill every SM several times over; the grid-stride loop covers the rest.
  const int64_t wanted = (args.n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  auto s = static_cast<cudaStream_t>(stream);
  if (args.first) {
    launch<true>(args, blocks, s);
  } else {
    launch<false>(args, blocks, s);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace deepspeed::ops::detail
