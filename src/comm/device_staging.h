// Tensors on a device the backend cannot take travel through a copy on one it can: a CPU scalar reduced over NCCL
// (a gradient norm, an overflow flag), a CUDA tensor over Gloo (ranks sharing one GPU in a test). Inputs are copied
// over before the call; outputs are written back into the caller's tensors when the work completes, after the
// fallback's own completion step. Tensors already on a device the backend takes pass through untouched, so
// nothing is copied in the usual case (every tensor on the backend's device).
//
// One DeviceStaging serves one collective on the issuing thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "comm/c10d_backend.h"
#include "comm/work_impl.h"

namespace deepspeed::comm::detail {

class DeviceStaging {
 public:
  explicit DeviceStaging(const Backend& backend);

  // An input the backend reads.
  at::Tensor in(const at::Tensor& t);
  // A tensor the backend reads and writes (all_reduce, broadcast, recv, ...): copied over and back.
  at::Tensor in_out(const at::Tensor& t);
  // A tensor the backend only writes: a fresh buffer there, copied back.
  at::Tensor out(const at::Tensor& t);
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& ts);

  // `p` with the copy-backs chained after its completion step.
  Pending finish(Pending p);

 private:
  bool fits(const at::Tensor& t) const { return t.device().type() == device_.type(); }

  c10::Device device_;  // where the backend's tensors must be
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;  // (caller's tensor, staged copy)
};

}  // namespace deepspeed::comm::detail
