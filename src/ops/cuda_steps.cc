// See cuda_steps.h.
#include "ops/cuda_steps.h"

#include <cstdlib>
#include <cstring>

#include "deepspeed/error.h"
#include "ops/tensor_op_steps.h"

#ifdef DS_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "ops/cuda_kernels.h"
#endif

namespace deepspeed::ops::detail {

bool fused_cuda_steps_enabled() {
#ifdef DS_WITH_CUDA_KERNELS
  const char* v = std::getenv("DS_CUDA_FUSED_STEPS");  // read at every step: a bench compares both in one run
  return v == nullptr || std::strcmp(v, "0") != 0;
#else
  return false;
#endif
}

void adam_fused_cuda(at::Tensor param, const at::Tensor& grad, at::Tensor exp_avg, at::Tensor exp_avg_sq,
                     const AdamScalars& s, const at::Tensor& param_copy) {
#ifdef DS_WITH_CUDA_KERNELS
  DS_CHECK(param.is_cuda(), "adam_fused_cuda: param must be on a CUDA device, got ", param.device());
  CudaAdamArgs a{};
  if (param_copy.defined()) {
    check_param_copy(param_copy, param);
    DS_CHECK(param_copy.is_contiguous(), "adam_fused_cuda: param_copy must be contiguous");
    a.copy = param_copy.data_ptr();
    a.copy_dtype = param_copy.scalar_type() == at::kBFloat16 ? CopyDtype::kBFloat16 : CopyDtype::kHalf;
  }
  a.p = param.data_ptr<float>();
  a.g = grad.data_ptr<float>();
  a.m = exp_avg.data_ptr<float>();
  a.v = exp_avg_sq.data_ptr<float>();
  a.n = param.numel();
  a.beta1 = s.beta1;
  a.one_minus_beta1 = s.one_minus_beta1;
  a.beta2 = s.beta2;
  a.one_minus_beta2 = s.one_minus_beta2;
  a.eps = s.eps;
  a.step_size = s.step_size;
  a.inv_sqrt_bc2 = s.inv_sqrt_bc2;
  a.l2 = s.l2;
  a.decay = s.decay;
  a.first = s.first;
  const c10::cuda::CUDAGuard guard(param.device());
  const char* err = launch_fused_adam(a, c10::cuda::getCurrentCUDAStream(param.device().index()).stream());
  DS_CHECK(err == nullptr, "the fused CUDA Adam step failed to launch on ", param.device(), ": ", err,
           " (set DS_CUDA_FUSED_STEPS=0 to use the tensor-op step, or build for this GPU's architecture with "
           "-DDS_CUDA_ARCHITECTURES)");
#else
  DS_CHECK(false, "adam_fused_cuda: this build has no CUDA kernels (built without CUDA, or with DS_CUDA_KERNELS=OFF)");
#endif
}

}  // namespace deepspeed::ops::detail
