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
//   (or, nvme, streams slices through write_slice / copy_back_slice) -> publish() -> zero_grads().
// Collective methods (every rank of the data-parallel group calls them) are marked so.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
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
  // Offload with a bf16/fp16 model: offers the optimizer the parameter storage to write in its own pass;
  // `accept(targets)` says whether it will. Stages that cannot be written that way return false.
  virtual bool fuse_copy_back(const std::function<bool(const std::vector<at::Tensor>&)>& accept) {
    (void)accept;
    return false;
  }
  // ZenFlow at stage 3 (partitions_parameters()): `values` written into the model-dtype partitions at `positions`
  // (int64, this rank's element offsets in masters()' group `group`, as MasterFragment::offset counts), without
  // touching the masters; after the last write, finish_partition_writes() makes every unit's next gather send them
  // (collective: it gathers the persistent unit again).
  virtual void write_partition_values(size_t group, const at::Tensor& positions, const at::Tensor& values) {
    (void)group, (void)positions, (void)values;
    throw Error("this ZeRO stage keeps whole parameters: write them directly");
  }
  virtual void finish_partition_writes() {}
  // Between these, publish() and finish_partition_writes() leave the persistent parameters' re-gather to
  // end_batched_writes(refresh = true), which makes it once if either asked for it: a step published and then
  // overwritten by ZenFlow's selected values gathers once instead of at each write. refresh = false (unwinding an
  // error) makes nothing and leaves the request to the next publish. Collective when it gathers.
  virtual void begin_batched_writes() {}
  virtual void end_batched_writes(bool refresh) { (void)refresh; }
  // offload_optimizer.super_offload: `ready(group, offset, grad)` is called, during a backward that ends an
  // accumulation window, for each range [offset, offset + grad.numel()) of masters()' group `group` whose reduced
  // gradient `grad` is final (each element once per such backward; `grad` stays valid until zero_grads). Returns
  // false, changing nothing, for a stage that cannot tell.
  virtual bool on_final_gradients(std::function<void(size_t group, int64_t offset, const at::Tensor& grad)> ready) {
    (void)ready;
    return false;
  }
  // nvme optimizer offload: this rank's share of group g as fp32 (the swapper's initial masters); the way an
  // updated slice [offset, offset + master.numel()) of it reaches the parameters; and the parameter slice an
  // optimizer kernel may write in its pass instead (undefined when it cannot: then write_slice).
  virtual at::Tensor initial_master(size_t group) const = 0;
  virtual void write_slice(size_t group, int64_t offset, const at::Tensor& master) = 0;
  virtual at::Tensor copy_back_slice(size_t group, int64_t offset, int64_t n) const = 0;

  // ---- Checkpoints ----
  // Where each parameter's elements sit in masters().
  virtual std::vector<MasterFragment> master_fragments() const = 0;
  // After masters() were overwritten (a loaded checkpoint): the parameters refreshed from them. Collective.
  virtual void restore_from_masters() = 0;
  // The full shape of every parameter, per group in group order.
  virtual std::vector<std::vector<std::vector<int64_t>>> param_shapes() const = 0;
  // Whether parameters are partitioned between uses (stage 3): exports then gather them unit by unit, the
  // parameters of each gather_units() entry at a time.
  virtual bool partitions_parameters() const { return false; }
  virtual std::vector<std::vector<at::Tensor>> gather_units() const { return {}; }

  // ---- Accounting ----
  virtual StageBytes bytes() const = 0;
  virtual StageStates states() const = 0;
  // Wall time (ms, cumulative) backward was kept waiting for gradient reductions.
  virtual double reduce_blocked_ms() const = 0;
  // Stage 3's gather and prefetch counters (zeros for stages that gather nothing).
  virtual Stage3Stats stats() const { return {}; }
  virtual void reset_peaks() {}
};

}  // namespace deepspeed::zero
