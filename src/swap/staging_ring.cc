#include "swap/staging_ring.h"

#include <ATen/ATen.h>

#include "deepspeed/error.h"

namespace deepspeed::swap {

StagingRing::StagingRing(int count, int64_t max_elems, at::ScalarType dtype, bool pin)
    : max_elems_(max_elems), dtype_(dtype), pin_(pin && accelerator::get_accelerator().pin_memory_supported()) {
  DS_CHECK_T(ConfigError, count >= 1, "zero_optimization.offload_param.buffer_count: swapped parameters pass through "
             "these host buffers on their way to the device; need at least 1, got ", count);
  DS_CHECK(max_elems >= 0, "StagingRing: negative buffer size ", max_elems);
  slots_.resize(static_cast<size_t>(count));
}

StagingRing::~StagingRing() {
  // The device may still be copying out of a buffer: its memory must outlive the copy.
  for (auto& s : slots_) s.copied.wait();
}

at::Tensor StagingRing::acquire(int64_t numel) {
  DS_CHECK(numel >= 0 && numel <= max_elems_, "StagingRing: a transfer of ", numel, " elements, buffers hold ",
           max_elems_);
  Slot& s = slots_[next_];
  s.copied.wait();
  if (!s.buffer.defined()) {
    s.buffer = at::empty({max_elems_}, at::TensorOptions().dtype(dtype_).device(at::kCPU));
    if (pin_) s.buffer = accelerator::get_accelerator().pin_memory(s.buffer);
  }
  last_ = next_;
  next_ = (next_ + 1) % slots_.size();
  return s.buffer.narrow(0, 0, numel);
}

void StagingRing::fence(c10::Device device) { slots_[last_].copied.record(device); }

int64_t StagingRing::allocated_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : slots_)
    if (s.buffer.defined()) bytes += s.buffer.nbytes();
  return bytes;
}

}  // namespace deepspeed::swap
