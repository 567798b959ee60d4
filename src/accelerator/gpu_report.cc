// ds_report's "GPU" section: whether this LibTorch has CUDA, the CUDA runtime it uses, the driver, NCCL, and each
// visible device. Read through LibTorch's CUDA hooks where they suffice, so the section prints on any build; the
// driver and NCCL versions need the CUDA headers (DS_WITH_CUDA builds only).
#include <ATen/detail/CUDAHooksInterface.h>

#include <cstdlib>
#include <string>

#include "accelerator/env_report.h"
#ifdef DS_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#endif
#endif

namespace deepspeed {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_text(long v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string visible_devices_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? "unset" : "'" + std::string(v) + "'";
}

}  // namespace

ReportSection gpu_report() {
  ReportSection section{"GPU", {}};
  auto& lines = section.lines;
  const auto& hooks = at::detail::getCUDAHooks();
  if (!hooks.hasCUDART()) {
    lines.emplace_back("CUDA in LibTorch", "no (a CPU-only LibTorch: the cuda accelerator and NCCL are unavailable)");
    return section;
  }
  lines.emplace_back("CUDA in LibTorch", "yes, runtime " + cuda_version_text(hooks.versionCUDART()));
#ifdef DS_WITH_CUDA
  int driver = 0;
  const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  lines.emplace_back("CUDA driver", has_driver ? "supports CUDA " + cuda_version_text(driver)
                                               : "none (no NVIDIA driver on this machine)");
#ifdef USE_C10D_NCCL
  lines.emplace_back("NCCL", c10d::getNcclVersion());
#else
  lines.emplace_back("NCCL", "not in this LibTorch");
#endif
#endif
  const int count = hooks.getNumGPUs();
  lines.emplace_back("GPUs visible", std::to_string(count) + " (CUDA_VISIBLE_DEVICES " + visible_devices_env() + ")");
#ifdef DS_WITH_CUDA
  for (int i = 0; i < count; ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
    lines.emplace_back("GPU " + std::to_string(i), std::string(p->name) + ", sm_" + std::to_string(p->major) +
                                                       std::to_string(p->minor) + ", " +
                                                       std::to_string(p->totalGlobalMem >> 20) + " MiB");
  }
#endif
  return section;
}

}  // namespace deepspeed
