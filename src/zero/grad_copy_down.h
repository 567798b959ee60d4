// ZeRO-Offload's early gradient copies: a final gradient copied from the device into host memory as soon as its
// reduction ends, while backward goes on with earlier layers (stage 3 per unit partition, stages 1 and 2 per
// bucket). From a device the copy runs on a stream of its own, into pinned memory, without blocking the host; the
// step waits for all of them before it reads the host copies. On a CPU device it is a plain copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "deepspeed/accelerator.h"

namespace deepspeed::zero {

class GradCopyDown {
 public:
  // Copies `src` into `host` (same size), after the work the current stream of src's device has queued (the copy
  // stream and its event belong to src's device, whichever device the calling thread has current). A change of
  // dtype happens on that current stream first, so the temporary comes from its pool, not the copy stream's. `src`
  // must not be written before wait(). Returns false, copying nothing, from a device into pageable memory: there each
  // copy would block the host until the device caught up, so the caller copies those at the step, all in one go.
  bool copy(const at::Tensor& host, const at::Tensor& src);
  // Blocks until every copy issued so far has finished.
  void wait() const {
    if (stream_) stream_->synchronize();
  }

 private:
  std::unique_ptr<accelerator::Stream> stream_;  // created at the first copy from a device
  int device_ = -1;                              // the device stream_ and queued_ belong to
  std::unique_ptr<accelerator::Event> queued_;   // recorded again before each copy: the copy stream waits on it
};

}  // namespace deepspeed::zero
