#include "zero/flat_stage.h"

#include <ATen/ATen.h>

#include <cstdio>

#include "deepspeed/error.h"

namespace deepspeed::zero {

FlatStage::FlatStage(std::vector<FlatGroup>& groups, comm::ProcessGroup world, FlatStageOptions options)
    : groups_(groups), stage_(options.stage) {
  DS_ASSERT(stage_ >= 0 && stage_ <= 2, "FlatStage is for ZeRO stages 0-2, got ", stage_);
  FlattenOptions fo;
  fo.dtype = options.dtype;
  fo.partitioned = stage_ >= 1;
  fo.group = world;
  fo.full_grads = stage_ < 2;
  fo.grad_dtype = options.grad_dtype;
  flatten_into(groups_, fo);
  // Every rank starts from rank 0's parameters, whatever its own initialization drew.
  // (Experts from the first rank of their own group: other expert-parallel ranks hold other experts.)
  for (auto& g : groups_) {
    comm::ProcessGroup copies = copies_group(g, world);
    if (copies.size() > 1) copies.broadcast(g.params_flat, /*src=*/copies.ranks()[0]);
  }
  GradReducerOptions ro = options.reducer;
  ro.storage = stage_ == 2 ? GradStorage::kPartitioned
               : options.grad_dtype == options.dtype ? GradStorage::kViews
                                                     : GradStorage::kAccumulate;
  ro.partition_dtype = options.grad_dtype;
  MasterWeightsOptions mo = options.masters;
  mo.partitioned = stage_ >= 1;
  // ZeRO-Offload: each bucket's final gradients go to host memory as its reduction completes (the masters are built
  // first: the reducer's hooks write into them).
  mo.early_host_grads = mo.early_host_grads && mo.offload_to_host && mo.partitioned;
  masters_ = std::make_unique<MasterWeights>(groups_, world, mo);
  if (mo.early_host_grads) {
    MasterWeights* masters = masters_.get();
    ro.on_partition_final = [masters](size_t g, int64_t begin, const at::Tensor& grads) {
      masters->copy_final_grads(g, begin, grads);
    };
  }
  const int rank = world.rank();
  reducer_ = std::make_unique<GradReducer>(groups_, std::move(world), ro);
  // What the stage sized from the model instead of the config's value, said once at start-up.
  if (rank == 0 && reducer_->bucket_elems() < ro.bucket_elems)
    std::fprintf(stderr,
                 "deepspeed: zero_optimization.reduce_bucket_size %lld exceeds what stage 2 stages for this model: "
                 "buckets of %lld elements (this rank's share of the gradients over the live staging buffers)\n",
                 static_cast<long long>(ro.bucket_elems), static_cast<long long>(reducer_->bucket_elems()));
}

void FlatStage::begin_backward(bool boundary) {
  ensure_grad_views(groups_);
  reducer_->begin_backward(boundary);
}

void FlatStage::finish_backward() { reducer_->finish_backward(); }

void FlatStage::zero_grads() {
  masters_->forget_final_grads();  // first: their copies may still be reading the gradients
  zero::zero_grads(groups_);        // the free function of flat_params.h, not this member
  reducer_->zero_partition_grads();
}

Stage3Stats FlatStage::stats() const {
  Stage3Stats s;
  s.reduce_wait_ms = reducer_->blocked_ms();
  s.host_grad_copies_in_backward = masters_->final_grad_copies();
  return s;
}

std::vector<at::Tensor> FlatStage::step_grads() {
  std::vector<at::Tensor> grads;
  for (size_t g = 0; g < groups_.size(); ++g) grads.push_back(reducer_->partition_grads(g));
  return masters_->stage_grads(grads);  // offload: the CPU optimizer reads host copies
}

std::vector<std::vector<std::vector<int64_t>>> FlatStage::param_shapes() const {
  std::vector<std::vector<std::vector<int64_t>>> out(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const auto& p : groups_[g].params) out[g].push_back(p.sizes().vec());
  return out;
}

StageBytes FlatStage::bytes() const {
  StageBytes b;
  for (size_t g = 0; g < groups_.size(); ++g) {
    b.params += groups_[g].params_flat.nbytes();
    b.gradients += groups_[g].grads_flat.defined() ? groups_[g].grads_flat.nbytes()
                                                   : reducer_->partition_grads(g).nbytes();
  }
  b.master_copies = masters_->copy_bytes();
  b.working = reducer_->staging_bytes();
  b.host_grads = masters_->host_grad_bytes();
  b.offloaded = masters_->offloaded();
  return b;
}

StageStates FlatStage::states() const {
  // The caller may move or free what it gets: the early gradient copies down must have read it first.
  masters_->wait_final_grads();
  StageStates s;
  s.hp_params = masters_->masters();
  for (size_t g = 0; g < groups_.size(); ++g) {
    s.lp_params.push_back(groups_[g].params_flat);
    s.lp_grads.push_back(reducer_->partition_grads(g));
  }
  return s;
}

void FlatStage::reduce_accumulated() {
  DS_CHECK(stage_ <= 1, "reducing gradients accumulated over micro-batches needs ZeRO stage 0 or 1, got ", stage_);
  // An armed pass with no backward in it launches every bucket from the accumulated flat gradients.
  reducer_->begin_backward(/*reduce=*/true);
  reducer_->finish_backward();
}

at::Tensor FlatStage::accumulated_grad(size_t group, size_t index) const {
  const FlatGroup& fg = groups_.at(group);
  DS_CHECK(fg.grads_flat.defined(), "a parameter's accumulated gradient needs ZeRO stage 0 or 1, got ", stage_);
  const at::Tensor& p = fg.params.at(index);
  return fg.grads_flat.narrow(0, fg.offsets[index], p.numel()).view(p.sizes());
}

int64_t FlatStage::grad_begin(size_t group) const {
  const FlatGroup& fg = groups_.at(group);
  return fg.layout.begin(fg.layout.rank());
}

DeferredReduction& deferred_reduction(Stage& stage, const char* what) {
  auto* flat = dynamic_cast<FlatStage*>(&stage);
  DS_CHECK(flat != nullptr, what, ": the pipeline engine needs ZeRO stage 0 or 1 (zero_optimization.stage), got 3");
  return *flat;
}

}  // namespace deepspeed::zero
