// A fence after asynchronous copies between host buffers and a device (pinned host memory up to a device, or a
// device into a staging buffer, issued without blocking the host): whoever reuses those buffers next waits for it
// first. Used by the masters' publish, stage 3's shard loads and the swap staging ring. Holds the latest record only,
// on the current stream of the device the copies went to (not the calling thread's current device: a caller on
// another thread may have another one current); empty until the first record (so on a CPU device, where nothing is
// copied asynchronously, waiting costs nothing).
#pragma once

#include <memory>

#include "deepspeed/accelerator.h"

namespace deepspeed::accelerator {

class HostReadFence {
 public:
  // After issuing the copies to `device`, on its current stream (where they were queued).
  void record(c10::Device device) {
    auto& acc = get_accelerator();
    const int index = device.index();
    if (!event_ || index != device_) event_ = acc.new_event();  // an event belongs to the device it is recorded on
    device_ = index;
    event_->record(acc.current_stream(index).get());
  }
  // Blocks until the recorded copies have read their buffers.
  void wait() const {
    if (event_) event_->synchronize();
  }

 private:
  std::unique_ptr<accelerator::Event> event_;
  int device_ = -1;
};

}  // namespace deepspeed::accelerator
