// See nccl_group.h. USE_C10D_NCCL comes with a LibTorch built with NCCL (PyPI's CUDA builds).
#include "comm/nccl_group.h"

#include <torch/csrc/api/include/torch/version.h>

#include "deepspeed/accelerator.h"
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace deepspeed::comm::detail {

void check_nccl_usable(const std::string& backend) {
  DS_CHECK_T(CommError, backend == "nccl", "comm backend '", backend, "' is not supported; use \"gloo\" (CPU "
             "tensors) or \"nccl\" (CUDA tensors)");
#ifndef USE_C10D_NCCL
  DS_CHECK_T(CommError, false, "comm backend 'nccl' is not available in this build (LibTorch without NCCL); use "
             "\"gloo\"");
#endif
  const std::string acc = accelerator::get_accelerator().name();
  DS_CHECK_T(CommError, acc == "cuda", "comm backend 'nccl' needs CUDA devices, but this process runs on the ", acc,
             " accelerator (no device visible, or DS_ACCELERATOR=", acc, "); use \"gloo\"");
}

const BackendCapabilities& nccl_capabilities() {
  static const BackendCapabilities caps = [] {
    BackendCapabilities c;
    c.backend = "nccl";
    c.device_type = c10::kCUDA;
#ifdef USE_C10D_NCCL
    c.library_version = std::string(TORCH_VERSION) + ", NCCL " + c10d::getNcclVersion();
#else
    c.library_version = TORCH_VERSION;
#endif
    c.reduce_dtypes = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar, at::kByte, at::kInt, at::kLong};
    c.avg = true;  // ncclAvg, NCCL >= 2.10
    c.all_gather_into_tensor = true;
    c.reduce_scatter_tensor = true;
    c.per_owner_partitioned = false;
    c.in_place_by_owner = false;  // NCCL's flat calls run in place on the device without staging
    return c;
  }();
  return caps;
}

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const BackendOptions& options,
                                                  const c10::intrusive_ptr<c10d::Store>& store) {
#ifdef USE_C10D_NCCL
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = options.timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, options.rank, options.size, opts);
  // As torch's init_process_group(device_id=...): without a bound device, an operation with no tensor to name one
  // (a barrier) guesses group_rank % device_count, a stray context or, when two ranks guess one GPU, a hang.
  if (options.device_index >= 0)
    pg->setBoundDeviceId(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(options.device_index)));
  return pg;
#else
  check_nccl_usable("nccl");  // throws
  return {};
#endif
}

}  // namespace deepspeed::comm::detail
