// The NCCL side of the c10d adapter (c10d_backend.cc): whether this process can use NCCL, what it does natively,
// and its process group. Kept apart so only this file compiles NCCL's headers. Names c10d types: include it only
// from the adapter.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/c10d_backend.h"

namespace deepspeed::comm::detail {

// Throws CommError with the reason when `backend` cannot be used by this process: a name other than gloo/nccl, a
// LibTorch without NCCL, or no CUDA device (the accelerator is not cuda).
void check_nccl_usable(const std::string& backend);

// NCCL's native set, known without probing: every reduction dtype but int16, AVG, and flat collectives.
const BackendCapabilities& nccl_capabilities();

// NCCL's process group on the device this rank bound (accelerator::bind_local_device).
c10::intrusive_ptr<c10d::Backend> make_nccl_group(const BackendOptions& options,
                                                  const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace deepspeed::comm::detail
