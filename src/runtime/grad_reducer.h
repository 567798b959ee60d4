// Data-parallel gradient averaging in buckets, overlapped with backward (stage 0).
//
// Each flat group's gradient buffer is cut into buckets of about `bucket_elems` elements: contiguous ranges taken
// from the end of the buffer, because backward produces the last layers' gradients first. A post-accumulation hook
// on every parameter's AccumulateGrad node counts a bucket down; when a bucket is complete (and overlap is on) its
// all-reduce starts asynchronously while autograd continues with earlier layers. Buckets are always launched in
// the same fixed order on every rank (a bucket waits for those before it), so ranks never issue collectives in a
// different order even if autograd visits parameters differently. finish_backward() launches what is left (unused
// parameters never fire their hook), waits for every bucket and applies DeepSpeed's averaging factors.
//
// Not thread-safe beyond autograd's own use: hooks run on the autograd thread while backward() blocks the caller.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "runtime/flat_params.h"

namespace deepspeed::runtime {

struct GradReducerOptions {
  int64_t bucket_elems = 500000000;  // DeepSpeed's allreduce_bucket_size default (elements)
  bool overlap_comm = true;          // start bucket all-reduces from the hooks
  bool prescale_gradients = false;   // divide by the world size before the all-reduce instead of after
  double gradient_predivide_factor = 1.0;
};

class GradReducer {
 public:
  // Registers hooks on every parameter of `groups` (whose flat buffers must outlive the reducer).
  GradReducer(std::vector<FlatGroup>& groups, comm::ProcessGroup group, GradReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Arms the hooks for one backward pass; only a boundary pass reduces.
  void begin_backward(bool reduce);
  // Launches the buckets not yet launched, waits for all, applies the averaging factor. No-op unless armed to reduce.
  void finish_backward();

  size_t num_buckets() const;
  // Buckets whose all-reduce was started from a hook during the last backward (for tests of overlap).
  size_t buckets_launched_during_backward() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace deepspeed::runtime
