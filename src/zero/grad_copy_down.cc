#include "zero/grad_copy_down.h"

#include <ATen/ATen.h>

namespace deepspeed::zero {

bool GradCopyDown::copy(const at::Tensor& host, const at::Tensor& src) {
  if (src.is_cpu()) {
    host.copy_(src);
    return true;
  }
  if (!host.is_pinned()) return false;
  auto& accel = accelerator::get_accelerator();
  if (!stream_) stream_ = accel.new_stream();
  // After the reduction's work, which the compute stream has queued; into pinned memory the copy does not block.
  const std::unique_ptr<accelerator::Event> reduced = accel.new_event();
  reduced->record();
  stream_->wait_event(*reduced);
  accelerator::StreamGuard on_copy_stream(*stream_);
  host.copy_(src, /*non_blocking=*/true);
  return true;
}

}  // namespace deepspeed::zero
