// A fence after asynchronous copies that read host buffers (pinned host memory up to a device, issued without
// blocking the host): whoever writes those buffers next waits for it first. Holds the latest record only, on the
// stream that was current then; empty until the first record (so on a CPU device, where nothing is copied
// asynchronously, waiting costs nothing).
#pragma once

#include <memory>

#include "deepspeed/accelerator.h"

namespace deepspeed::zero {

class HostReadFence {
 public:
  // After issuing the copies, on the current stream.
  void record() {
    if (!event_) event_ = accelerator::get_accelerator().new_event();
    event_->record();
  }
  // Blocks until the recorded copies have read their buffers.
  void wait() const {
    if (event_) event_->synchronize();
  }

 private:
  std::unique_ptr<accelerator::Event> event_;
};

}  // namespace deepspeed::zero
