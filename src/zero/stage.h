// The seam between the engine and ZeRO: everything the engine's step, checkpoints and accounting need from a
// stage, whichever it is. FlatStage (flat_stage.h: stages 0-2, whole parameters in flat buffers, gradients reduced
// in buckets, masters partitioned from stage 1) and Stage3 (stage3/stage3.h: parameters partitioned and gathered per
// unit) implement it; make_stage() (make_stage.h) builds the one the config asks for. Optimizer offload (cpu, nvme)
// is part of the stage: the engine only sees the tensors the optimizer reads and writes.
//
// A step, as the engine drives it:
//   begin_forward / end_forward around the model's forward (stage 3 gathers its root and persistent parameters);
//   begin_backward(boundary) / finish_backward around loss.backward() (gradient reduction is armed, overlapped and
//   finished here; `boundary` says the pass ends a gradient-accumulation window);
//   at the boundary: step_grads() -> first_overflow / global_norm -> the optimizer updates masters() with them
//   (or, nvme, streams slices through zero::SlicedMasters, stage_features.h) -> publish() -> zero_grads().
// Collective methods (every rank of the data-parallel group calls them) are marked so.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "deepspeed/error.h"
#include "deepspeed/zero.h"
#include "zero/partition.h"

namespace deepspeed::zero {

// Bytes a stage holds at rest on this rank (Engine::model_state_bytes adds the optimizer's).
struct StageBytes {
  int64_t params = 0;         // the model's parameters in its dtype (stage 3: partitions + persistent parameters)
  int64_t gradients = 0;      // fp32 gradients kept across the step
  int64_t master_copies = 0;  // fp32 masters that are copies (0 when fp32 parameters are their own masters)
  int64_t working = 0;        // staging buckets (stage 2) or gathered parameters (stage 3) in use now
  int64_t host_grads = 0;     // offload: the gradient copies in host memory
  bool offloaded = false;     // offload_optimizer.device "cpu"
  int64_t host_params = 0;    // offload_param.device "cpu": the partitions kept in host memory (counted in params)
};

// The tensors Engine::offload_states may move, by DeepSpeed's OffloadStateTypeEnum.
struct StageStates {
  std::vector<at::Tensor> hp_params;  // fp32 masters
  std::vector<at::Tensor> lp_params;  // the parameters' storage in the model dtype (flat buffers / partitions)
  std::vector<at::Tensor> lp_grads;   // the reduced gradients this rank keeps
};

class Stage {
 public:
  virtual ~Stage() = default;

  // ---- The step ----
  virtual void begin_forward() {}
  virtual void end_forward() {}
  virtual void begin_backward(bool boundary) = 0;
  virtual void finish_backward() = 0;  // collective
  // Clears the accumulated gradients (after the optimizer step, or to drop a failed batch).
  virtual void zero_grads() = 0;

  // ---- The optimizer's view: one entry per parameter group ----
  // fp32 masters of this rank's share (empty with nvme optimizer offload: they live in the swap files).
  virtual const std::vector<at::Tensor>& masters() const = 0;
  // This rank's reduced gradients as the optimizer reads them (offload: their copies in host memory).
  virtual std::vector<at::Tensor> step_grads() = 0;
  // L2 norm of `grads` (as step_grads returned them) over the whole model. Collective.
  virtual double global_norm(const std::vector<at::Tensor>& grads) const = 0;
  // (group, index in group) of the first parameter whose gradient holds inf/NaN on any rank. Collective.
  virtual std::optional<std::pair<size_t, size_t>> first_overflow(const std::vector<at::Tensor>& grads) const = 0;
  // The updated masters into the model's parameters on every rank. Collective.
  virtual void publish() = 0;
  // (What only some stages do for one feature each, NVMe's sliced masters among them: zero/stage_features.h.)

  // ---- Checkpoints ----
  // Where each parameter's elements sit in masters().
  virtual std::vector<MasterFragment> master_fragments() const = 0;
  // After masters() were overwritten (a loaded checkpoint): the parameters refreshed from them. Collective.
  virtual void restore_from_masters() = 0;
  // The full shape of every parameter, per group in group order.
  virtual std::vector<std::vector<std::vector<int64_t>>> param_shapes() const = 0;
  // (Whether the stage partitions parameters and gathers them between uses: GatheredUnits, stage_features.h.)

  // ---- Accounting ----
  virtual StageBytes bytes() const = 0;
  virtual StageStates states() const = 0;
  // The gather, prefetch and reduction counters (Stage3Stats::reduce_wait_ms: wall time, cumulative, backward was
  // kept waiting for gradient reductions, at every stage; the gather counters are zeros for stages that gather
  // nothing).
  virtual Stage3Stats stats() const = 0;
  // (Peaks that can be reset between measurements: PeakCounters, stage_features.h.)
};

}  // namespace deepspeed::zero
