// ZeRO stages 0, 1 and 2 behind the Stage seam (stage.h): every parameter group lives in one flat buffer
// (flat_params.h), gradients are reduced in buckets overlapped with backward (grad_reducer.h), and the optimizer
// updates fp32 masters that are the whole buffer (stage 0) or this rank's partition of it (stages 1 and 2), which
// publish() gathers back into every rank's parameters (master_weights.h). Stage 2 keeps only this rank's partition
// of the gradients as well.
//
// The pipeline engine drives micro-batches itself and needs three things only a flat stage has: a reduction of the
// gradients accumulated over several backward passes, a parameter's accumulated gradient (tied weights) and the
// range of each group this rank's gradients cover (the replica's norm).
#pragma once

#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "zero/deferred_reduction.h"
#include "zero/stage_features.h"
#include "zero/flat_params.h"
#include "zero/grad_reducer.h"
#include "zero/master_weights.h"
#include "zero/stage.h"

namespace deepspeed::zero {

struct FlatStageOptions {
  int stage = 0;  // 0, 1 or 2
  at::ScalarType dtype = at::kFloat;
  // Where gradients accumulate over micro-steps (data_types.grad_accum_dtype): fp32, or `dtype` itself (stages 0/1:
  // .grad are views of a buffer in the model's dtype; stage 2: the partition is kept in it).
  at::ScalarType grad_dtype = at::kFloat;
  GradReducerOptions reducer;      // storage, reduction and partition dtype are derived from stage and dtypes
  MasterWeightsOptions masters;    // partitioned is derived from stage
};

class FlatStage : public Stage, public DeferredReduction, public SlicedMasters, public FusedCopyBack {
 public:
  // Flattens `groups` (owned by the caller, outliving the stage), starts every rank from the first copy's values
  // and registers the gradient hooks. Collective over `world`.
  FlatStage(std::vector<FlatGroup>& groups, comm::ProcessGroup world, FlatStageOptions options);

  void begin_backward(bool boundary) override;
  void finish_backward() override;
  void zero_grads() override;

  const std::vector<at::Tensor>& masters() const override { return masters_->masters(); }
  std::vector<at::Tensor> step_grads() override;
  double global_norm(const std::vector<at::Tensor>& grads) const override { return masters_->global_norm(grads); }
  std::optional<std::pair<size_t, size_t>> first_overflow(const std::vector<at::Tensor>& grads) const override {
    return masters_->first_overflow(grads);
  }
  void publish() override { masters_->publish(); }
  bool fuse_copy_back(const std::function<bool(const std::vector<at::Tensor>&)>& accept) override {
    return masters_->fuse_copy_back(accept);
  }
  at::Tensor initial_master(size_t group) const override { return masters_->initial_master(group); }
  void write_slice(size_t group, int64_t offset, const at::Tensor& master) override {
    masters_->write_slice(group, offset, master);
  }
  at::Tensor copy_back_slice(size_t group, int64_t offset, int64_t n) const override {
    return masters_->copy_back_slice(group, offset, n);
  }

  std::vector<MasterFragment> master_fragments() const override { return masters_->master_fragments(); }
  void restore_from_masters() override { masters_->restore_params(); }
  std::vector<std::vector<std::vector<int64_t>>> param_shapes() const override;

  StageBytes bytes() const override;
  StageStates states() const override;
  // Only reduce_wait_ms and host_grad_copies_in_backward (ZeRO-Offload); the rest are stage 3's.
  Stage3Stats stats() const override;

  // ---- DeferredReduction: for the pipeline engine (stages 0 and 1) ----
  void reduce_accumulated() override;
  at::Tensor accumulated_grad(size_t group, size_t index) const override;
  int64_t grad_begin(size_t group) const override;
  bool partitioned() const override { return stage_ >= 1; }

 private:
  std::vector<FlatGroup>& groups_;
  int stage_;
  std::unique_ptr<MasterWeights> masters_;  // before the reducer, whose hooks may write into it: outlives them
  std::unique_ptr<GradReducer> reducer_;
};

}  // namespace deepspeed::zero
