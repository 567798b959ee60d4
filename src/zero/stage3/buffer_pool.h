// The stage-3 pool of contiguous buffers (DeepSpeed's contiguous memory allocator): gathered parameters and
// gradient staging live in buffers taken from here and handed back when a unit is released, so once the first step
// has sized the pool a training step makes few new large allocations. Buffers are reused by exact (dtype, numel);
// the units of a model are few distinct sizes (transformer blocks share one), so the free lists stay short.
//
// A free buffer is resident memory like a gathered one, so the pool keeps free buffers only while everything it
// holds (in use + free) fits the cache limit (stage 3 sets stage3_max_live_parameters' bytes); past it a released
// buffer goes back to the allocator. Without the limit a step that once needed many buffers at the same time would
// keep all of them for good.
//
// Not thread-safe: used from the training thread and, during backward, the autograd thread, never both at once
// (the training thread is blocked inside backward()).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace deepspeed::zero {

class BufferPool {
 public:
  // A buffer of exactly `numel` elements of `dtype` (contents unspecified).
  at::Tensor acquire(at::ScalarType dtype, int64_t numel);
  // Gives a buffer from acquire() back for reuse.
  void release(at::Tensor buffer);
  // Bytes (in use + free) beyond which released buffers are freed instead of kept; default: no limit.
  void set_cache_limit(int64_t bytes) { cache_limit_ = bytes; }

  int64_t allocations() const { return allocations_; }  // fresh allocations since construction
  int64_t bytes_in_use() const { return in_use_; }
  int64_t peak_bytes_in_use() const { return peak_in_use_; }
  int64_t bytes_reserved() const { return reserved_; }  // in use + free
  void reset_peak() { peak_in_use_ = in_use_; }

 private:
  std::map<std::pair<int, int64_t>, std::vector<at::Tensor>> free_;
  int64_t allocations_ = 0;
  int64_t in_use_ = 0;
  int64_t peak_in_use_ = 0;
  int64_t reserved_ = 0;
  int64_t cache_limit_ = std::numeric_limits<int64_t>::max();
};

}  // namespace deepspeed::zero
