// What some ZeRO stages can do beyond the Stage seam (stage.h), each for the one feature that needs it. A feature
// asks for its interface once, when it is built (feature<T>(stage): null when the stage has none), instead of every
// stage carrying a do-nothing or throwing method for it.
//   SlicedMasters    NVMe optimizer offload streams the masters a slice at a time (both stages)
//   FusedCopyBack    offload with a 16-bit model: the optimizer writes the parameters in its own pass (stages 0-2)
//   FinalGradients   SuperOffload starts each partition's step as its gradient is final (stage 3)
//   PartitionWrites  ZenFlow writes selected values into the model-dtype partitions (stage 3)
//   GatheredUnits    exports and saves gather partitioned parameters unit by unit (stage 3)
//   PeakCounters     Engine::reset_stage3_peaks starts a new peak measurement (stage 3)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "zero/stage.h"

namespace deepspeed::zero {

class SlicedMasters {
 public:
  virtual ~SlicedMasters() = default;
  // This rank's share of group g as fp32 (the swapper's initial masters); the way an updated slice
  // [offset, offset + master.numel()) of it reaches the parameters; and the parameter slice an optimizer kernel may
  // write in its pass instead (undefined when it cannot: then write_slice).
  virtual at::Tensor initial_master(size_t group) const = 0;
  virtual void write_slice(size_t group, int64_t offset, const at::Tensor& master) = 0;
  virtual at::Tensor copy_back_slice(size_t group, int64_t offset, int64_t n) const = 0;
};

class FusedCopyBack {
 public:
  virtual ~FusedCopyBack() = default;
  // Offers the optimizer the parameter storage to write in its own pass; `accept(targets)` says whether it will.
  // Returns whether it was taken.
  virtual bool fuse_copy_back(const std::function<bool(const std::vector<at::Tensor>&)>& accept) = 0;
};

class FinalGradients {
 public:
  virtual ~FinalGradients() = default;
  // `ready(group, offset, grad)` is called, during a backward that ends an accumulation window, for each range
  // [offset, offset + grad.numel()) of masters()' group `group` whose reduced gradient `grad` is final (each element
  // once per such backward; `grad` stays valid until zero_grads).
  virtual void on_final_gradients(std::function<void(size_t group, int64_t offset, const at::Tensor& grad)> ready) = 0;
};

class PartitionWrites {
 public:
  virtual ~PartitionWrites() = default;
  // `values` written into the model-dtype partitions at `positions` (int64, this rank's element offsets in masters()'
  // group `group`, as MasterFragment::offset counts), without touching the masters; after the last write,
  // finish_partition_writes() makes every unit's next gather send them (collective: it gathers the persistent unit
  // again).
  virtual void write_partition_values(size_t group, const at::Tensor& positions, const at::Tensor& values) = 0;
  virtual void finish_partition_writes() = 0;
  // Between these, publish() and finish_partition_writes() leave the persistent parameters' re-gather to
  // end_batched_writes(refresh = true), which makes it once if either asked for it. refresh = false (unwinding an
  // error) makes nothing and leaves the request to the next publish. Collective when it gathers.
  virtual void begin_batched_writes() = 0;
  virtual void end_batched_writes(bool refresh) = 0;
};

class GatheredUnits {
 public:
  virtual ~GatheredUnits() = default;
  // The parameters of each unit the stage gathers between uses, in module order (units without parameters left
  // out): exports gather them unit by unit.
  virtual std::vector<std::vector<at::Tensor>> gather_units() const = 0;
};

class PeakCounters {
 public:
  virtual ~PeakCounters() = default;
  // Stats::peak_live_elems and the gather pool's peak restart from what is live now.
  virtual void reset_peaks() = 0;
};

// `stage`'s interface for a feature, or null when it has none.
template <class Feature>
Feature* feature(Stage& stage) {
  return dynamic_cast<Feature*>(&stage);
}
template <class Feature>
const Feature* feature(const Stage& stage) {
  return dynamic_cast<const Feature*>(&stage);
}

// Whether `stage` partitions the parameters themselves (and gathers them between uses), rather than keeping them
// whole on every rank.
inline bool partitions_parameters(const Stage& stage) { return feature<GatheredUnits>(stage) != nullptr; }

}  // namespace deepspeed::zero
