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
  const int device = src.device().index();
  if (!stream_ || device != device_) {
    if (stream_) stream_->synchronize();  // copies still in flight on the other device's stream
    stream_ = accel.new_stream(device);
    queued_ = accel.new_event();
    device_ = device;
  }
  const std::unique_ptr<accelerator::Stream> compute = accel.current_stream(device);
  // The dtype changes on the compute stream, into a temporary of its pool; the copy stream keeps it alive until the
  // copy has read it.
  const at::Tensor converted = src.scalar_type() == host.scalar_type() ? src : src.to(host.scalar_type());
  // After the reduction's work, which the compute stream has queued; into pinned memory the copy does not block.
  // (A stream's wait takes the event as recorded at the call, so recording it again for the next copy is safe.)
  queued_->record(compute.get());
  stream_->wait_event(*queued_);
  if (!converted.is_same(src)) accel.record_stream(converted, *stream_);
  accelerator::StreamGuard on_copy_stream(*stream_);
  host.copy_(converted, /*non_blocking=*/true);
  return true;
}

}  // namespace deepspeed::zero
