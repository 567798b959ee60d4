// The stage-3 pool of contiguous buffers (DeepSpeed's contiguous memory allocator): gathered parameters and
// gradient staging live in buffers taken from here and handed back when a unit is released, so once the first step
// has sized the pool a training step makes few new large allocations. A request takes the smallest free buffer of
// its dtype that holds it (up to twice its size; a larger one would idle most of its bytes), so units of near sizes
// (a transformer block, the embedding, the head) share buffers.
//
// A free buffer is resident memory like a gathered one, so the pool keeps free buffers only while everything it
// holds (in use + free) fits within the most it has ever had in use at once, and within the cache limit (stage 3
// sets stage3_max_live_parameters' bytes); past that a released buffer goes back to the allocator, and a request
// that finds no buffer to reuse first frees idle ones. So at the moment of the schedule's own peak no buffer sits
// idle, and a step that once needed many buffers at once does not keep them all beyond the limit.
//
// Not thread-safe: used from the training thread and, during backward, the autograd thread, never both at once
// (the training thread is blocked inside backward()).
//
// On a GPU, a buffer is handed back while work queued on the compute stream may still read it. Reuse is safe
// without an event fence because every user is ordered after that work: compute runs on the one current stream,
// and an NCCL collective that writes a reused buffer waits for the current stream before it starts (c10d orders
// its stream after the caller's), while Work::wait orders the current stream after the collective.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace deepspeed::zero {

class BufferPool {
 public:
  explicit BufferPool(c10::Device device = c10::Device(c10::kCPU)) : device_(device) {}
  // Where new buffers are allocated (the model's device); only before the first acquire.
  void set_device(c10::Device device) { device_ = device; }

  // A 1-d buffer of exactly `numel` elements of `dtype` (contents unspecified; possibly the front of a larger
  // allocation, whose bytes count as in use).
  at::Tensor acquire(at::ScalarType dtype, int64_t numel);
  // Gives a buffer from acquire() back for reuse.
  void release(at::Tensor buffer);
  // Frees every free buffer (before a stretch where none would be reused, so that they do not sit idle).
  void free_idle() {
    free_.clear();
    reserved_ = in_use_;
  }
  // Bytes (in use + free) beyond which released buffers are freed instead of kept; default: no limit.
  void set_cache_limit(int64_t bytes) { cache_limit_ = bytes; }

  int64_t allocations() const { return allocations_; }  // fresh allocations since construction
  int64_t bytes_in_use() const { return in_use_; }
  int64_t peak_bytes_in_use() const { return peak_in_use_; }  // since reset_peak()
  int64_t bytes_reserved() const { return reserved_; }  // in use + free
  void reset_peak() { peak_in_use_ = in_use_; }

 private:
  int64_t keep_limit() const { return std::min(cache_limit_, high_water_); }
  void free_idle_until(int64_t bytes_needed);

  c10::Device device_;
  std::map<std::pair<int, int64_t>, std::vector<at::Tensor>> free_;
  int64_t allocations_ = 0;
  int64_t in_use_ = 0;
  int64_t peak_in_use_ = 0;
  int64_t high_water_ = 0;  // the most ever in use at once (reset_peak() leaves it)
  int64_t reserved_ = 0;
  int64_t cache_limit_ = std::numeric_limits<int64_t>::max();
};

}  // namespace deepspeed::zero
