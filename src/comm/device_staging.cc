// See device_staging.h.
#include "comm/device_staging.h"

#include <ATen/ATen.h>

#include "deepspeed/accelerator.h"

namespace deepspeed::comm::detail {

DeviceStaging::DeviceStaging(const Backend& backend)
    : device_(backend.capabilities().device_type == c10::kCPU ? c10::Device(c10::kCPU)
                                                               : accelerator::get_accelerator().device()) {}

at::Tensor DeviceStaging::in(const at::Tensor& t) {
  return fits(t) ? t : t.to(device_, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor DeviceStaging::in_out(const at::Tensor& t) {
  if (fits(t)) return t;
  at::Tensor staged = t.to(device_, /*non_blocking=*/false, /*copy=*/true);
  copy_back_.emplace_back(t, staged);
  return staged;
}

at::Tensor DeviceStaging::out(const at::Tensor& t) {
  if (fits(t)) return t;
  at::Tensor staged = at::empty(t.sizes(), t.options().device(device_));
  copy_back_.emplace_back(t, staged);
  return staged;
}

std::vector<at::Tensor> DeviceStaging::out(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> staged;
  staged.reserve(ts.size());
  for (const auto& t : ts) staged.push_back(out(t));
  return staged;
}

Pending DeviceStaging::finish(Pending p) {
  if (copy_back_.empty()) return p;
  p.finalize = [inner = std::move(p.finalize), pairs = std::move(copy_back_)] {
    if (inner) inner();
    for (const auto& [mine, staged] : pairs) mine.copy_(staged);  // ordered after the collective on its stream
  };
  return p;
}

}  // namespace deepspeed::comm::detail
