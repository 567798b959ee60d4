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
  if (!stream_) {
    stream_ = accel.new_stream();
    queued_ = accel.new_event();
  }
  // After the reduction's work, which the compute stream has queued; into pinned memory the copy does not block.
  // (A stream's wait takes the event as recorded at the call, so recording it again for the next copy is safe.)
  queued_->record();
  stream_->wait_event(*queued_);
  accelerator::StreamGuard on_copy_stream(*stream_);
  host.copy_(src, /*non_blocking=*/true);
  return true;
}

}  // namespace deepspeed::zero
