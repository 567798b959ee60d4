// The engine's entry points for the pipeline engine (src/pipe/), which drives micro-batches itself: one
// micro-batch's backward without reduction, the deferred data-parallel reduction, a parameter's accumulated
// gradient (for tied weights) and the boundary step; plus the gradient norm and overflow decision agreed over the
// model-parallel group (the other stages of the same replica).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "runtime/engine_impl.h"
#include "zero/deferred_reduction.h"
#include "zero/global_norm.h"

namespace deepspeed {

void EngineImpl::backward_micro_batch(const at::Tensor& output, const at::Tensor& grad) {
  deferred_reduction("backward_micro_batch");  // refuses a stage the pipeline engine cannot drive
  DS_CHECK(module_->is_training(), "backward: the engine is in eval mode; call train() first");
  check_states_resident("backward");
  if (breakdown_) timers_.start("bwd");
  stage_->begin_backward(/*boundary=*/false);
  if (grad.defined()) {
    output.backward(grad);
  } else {
    DS_CHECK(output.defined() && output.numel() == 1, "backward: expected a scalar loss, got ",
             output.defined() ? output.sizes() : at::IntArrayRef{});
    const double factor = (scaler_ ? scaler_->loss_scale() : 1.0) /
                          static_cast<double>(config_.gradient_accumulation_steps.value());
    (factor != 1.0 ? output * factor : output).backward();
  }
  stage_->finish_backward();
  if (breakdown_) timers_.stop("bwd");
}

void EngineImpl::reduce_gradients() {
  deferred_reduction("reduce_gradients").reduce_accumulated();
}

std::pair<size_t, size_t> EngineImpl::locate(const at::Tensor& p) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i)
      if (groups_[g].params[i].unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return {g, i};
  DS_CHECK(false, "engine: a parameter of shape ", p.sizes(), " is not one the engine trains");
  return {0, 0};
}

at::Tensor EngineImpl::accumulated_grad(const at::Tensor& p) const {
  auto [g, i] = locate(p);
  return deferred_reduction("accumulated_grad").accumulated_grad(g, i);
}

void EngineImpl::pipeline_step(int64_t micro_batches) {
  check_states_resident("step");
  micro_steps_ += micro_batches;
  boundary_step();
}

void EngineImpl::discard_gradients() {
  stage_->zero_grads();
}

zero::DeferredReduction& EngineImpl::deferred_reduction(const char* what) const {
  return zero::deferred_reduction(*stage_, what);
}

bool EngineImpl::agree_overflow(bool local) {
  if (!layout_.model_parallel.is_member()) return local;
  at::Tensor flag = at::tensor({local ? int64_t{1} : int64_t{0}}, at::kLong);
  layout_.model_parallel.all_reduce(flag, comm::ReduceOp::kMax);
  return flag.item<int64_t>() != 0;
}

double EngineImpl::replica_grad_norm(const std::vector<at::Tensor>& grads) {
  const zero::DeferredReduction& flat = deferred_reduction("replica_grad_norm");
  // Excluded ranges per group, relative to this rank's gradient partition (the whole buffer when it is not partitioned).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> excluded(groups_.size());
  for (const auto& p : norm_excluded_) {
    auto [g, i] = locate(p);
    const zero::FlatGroup& fg = groups_[g];
    const int64_t begin = flat.grad_begin(g);
    const int64_t lo = std::max(fg.offsets[i], begin) - begin;
    const int64_t hi = std::min(fg.offsets[i] + p.numel(), begin + grads[g].numel()) - begin;
    if (lo < hi) excluded[g].emplace_back(lo, hi);
  }
  double sq = 0.0;
  auto add = [&](const at::Tensor& t) { sq += zero::squared_norm(t); };
  for (size_t g = 0; g < grads.size(); ++g) {
    auto& ranges = excluded[g];
    std::sort(ranges.begin(), ranges.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : ranges) {
      if (lo > at) add(grads[g].narrow(0, at, lo - at));
      at = std::max(at, hi);
    }
    if (at < grads[g].numel()) add(grads[g].narrow(0, at, grads[g].numel() - at));
  }
  at::Tensor total = at::tensor({sq}, at::kDouble);
  if (flat.partitioned() && layout_.data_parallel.size() > 1)
    layout_.data_parallel.all_reduce(total, comm::ReduceOp::kSum);
  layout_.model_parallel.all_reduce(total, comm::ReduceOp::kSum);
  return std::sqrt(std::max(0.0, total.item<double>()));
}

}  // namespace deepspeed
