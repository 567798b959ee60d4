// What the pipeline engine needs of a ZeRO stage it drives micro-batch by micro-batch (stages 0 and 1, FlatStage):
// the reduction of gradients accumulated over several backward passes, a parameter's accumulated gradient (tied
// weights), the range of each group this rank's step gradients cover, and whether they are a partition (the
// replica's norm).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

namespace deepspeed::zero {

class Stage;

class DeferredReduction {
 public:
  virtual ~DeferredReduction() = default;
  // Reduces the gradients accumulated by backward passes begun with boundary = false. Collective.
  virtual void reduce_accumulated() = 0;
  // Parameter `index` of group `group`'s accumulated fp32 gradient (a view of the full gradient buffer).
  virtual at::Tensor accumulated_grad(size_t group, size_t index) const = 0;
  // Elements [begin, begin + numel of step_grads()[group]) of group `group`'s flat buffer are this rank's.
  virtual int64_t grad_begin(size_t group) const = 0;
  // The step's gradients are this rank's partition (a norm over them sums over the data-parallel ranks).
  virtual bool partitioned() const = 0;
};

// `stage` as the pipeline engine drives it; throws naming `what` when the stage cannot be driven so.
DeferredReduction& deferred_reduction(Stage& stage, const char* what);

}  // namespace deepspeed::zero
