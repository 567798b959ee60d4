// Host buffers that swapped data passes through between a file and an accelerator: ZeRO-Infinity's parameter swap
// buffers (offload_param nvme: `buffer_count` of them, page-locked with `pin_memory`). A read lands in the ring's
// next buffer and is copied to the device without waiting; that buffer is handed out again only once the copy has
// completed (an event recorded after it), so at most `count` copies are in flight and no buffer is overwritten under
// one. Buffers are made on first use, each as large as the largest transfer the owner declared (at most buffer_size
// elements; DeepSpeed allocates the whole buffer_size each). A CPU device needs no ring: files are read straight into
// their destination there.
//
// Not thread-safe: one owner thread acquires and fences.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "accelerator/host_read_fence.h"
#include "deepspeed/accelerator.h"

namespace deepspeed::swap {

class StagingRing {
 public:
  // `count` buffers of `max_elems` elements of `dtype` (ConfigError naming offload_param.buffer_count when count < 1);
  // pinned when `pin` and the accelerator can pin.
  StagingRing(int count, int64_t max_elems, at::ScalarType dtype, bool pin);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // The next buffer's first `numel` elements, once the copy fenced on it last has completed.
  at::Tensor acquire(int64_t numel);
  // The copy out of (or into) the buffer acquire() last returned has been issued on the current stream of `device`
  // (the other end of the copy): the buffer is free again when that stream gets past it.
  void fence(c10::Device device);

  int count() const { return static_cast<int>(slots_.size()); }
  bool pinned() const { return pin_; }
  // Host bytes the ring holds now (buffers made so far).
  int64_t allocated_bytes() const;

 private:
  struct Slot {
    at::Tensor buffer;
    accelerator::HostReadFence copied;  // after the last copy that used the buffer
  };
  std::vector<Slot> slots_;
  int64_t max_elems_;
  at::ScalarType dtype_;
  bool pin_;
  size_t next_ = 0;
  size_t last_ = 0;  // the slot acquire() last returned
};

}  // namespace deepspeed::swap
