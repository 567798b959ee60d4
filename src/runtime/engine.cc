// The Engine's training step: forward, backward, and the boundary step (overflow check, unscale, clip, the optimizer
// step, LR schedule, zero grads). What differs between ZeRO stages (gradient reduction, where masters live,
// partitioning, offload) sits behind zero::Stage (zero/stage.h), how the update runs behind runtime::OptimizerStep
// (optimizer_step.h); building the engine is engine_build.cc, reporting engine_report.cc, checkpoints
// engine_checkpoint*.cc, the pipeline engine's entry points engine_pipe.cc.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "deepspeed/accelerator.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "runtime/engine_impl.h"

namespace deepspeed {

EngineImpl::~EngineImpl() {
  if (!print_comms_summary_) return;
  try {
    std::printf("Communication summary of rank 0 (comms_logger):\n");
    comm::log_summary(/*print=*/true);
  } catch (...) {  // never throw from a destructor; the summary is a courtesy
  }
}

void EngineImpl::check_states_resident(const char* what) const {
  DS_CHECK(!offloader_.offloaded(), what, ": the model states are offloaded (offload_states()); call reload_states() "
           "first");
}

void EngineImpl::offload_states(const OffloadStatesOptions& options) {
  check_step_closed("offload_states");
  land_overlapped_step();
  auto wanted = [&](OffloadStateType t) {
    return options.include.empty() ||
           std::find(options.include.begin(), options.include.end(), t) != options.include.end();
  };
  std::vector<at::Tensor> tensors;
  auto add = [&](const std::vector<at::Tensor>& ts) { tensors.insert(tensors.end(), ts.begin(), ts.end()); };
  if (wanted(OffloadStateType::kOptimStates) && optimizer_) add(optimizer_->state_tensors());
  const zero::StageStates states = stage_->states();
  if (wanted(OffloadStateType::kHpParams)) add(states.hp_params);
  if (wanted(OffloadStateType::kLpParams)) add(states.lp_params);
  if (wanted(OffloadStateType::kLpGrads)) add(states.lp_grads);
  offloader_.offload(tensors, options.pin_memory, device_);
}

void EngineImpl::begin_forward() {
  check_states_resident("forward");
  observers_.begin_forward(global_steps_);
  if (breakdown_) timers_.start("fwd");
  stage_->begin_forward();
}

void EngineImpl::end_forward() {
  stage_->end_forward();
  if (breakdown_) timers_.stop("fwd");
  observers_.end_forward();
}

void EngineImpl::backward(const at::Tensor& loss) {
  DS_CHECK(loss.defined() && loss.numel() == 1, "backward: expected a scalar loss, got ",
           loss.defined() ? loss.sizes() : at::IntArrayRef{});
  DS_CHECK(module_->is_training(), "backward: the engine is in eval mode; call engine.train() first");
  check_states_resident("backward");
  observers_.begin_backward();
  if (breakdown_) timers_.start("bwd");
  const double factor = (scaler_ ? scaler_->loss_scale() : 1.0) / static_cast<double>(iterations_->loss_divisor());
  at::Tensor scaled = factor != 1.0 ? loss * factor : loss;
  iterations_->begin_backward(micro_steps_);
  // A step may start during this backward (a speculative one), with the unscale the step would use.
  if (is_boundary()) step_->begin_window_backward(scaler_ ? 1.0 / scaler_->loss_scale() : 1.0);
  stage_->begin_backward(is_boundary());
  try {
    scaled.backward();
    stage_->finish_backward();
  } catch (...) {
    step_->abandon_started();
    throw;
  }
  // A copy: an fp64 loss would otherwise be the caller's own tensor, which it may change before step().
  const at::Tensor value = loss.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true).reshape({});
  step_loss_sum_ = step_loss_sum_.defined() ? step_loss_sum_ + value : value;
  ++step_loss_count_;
  if (breakdown_) timers_.stop("bwd");
  observers_.end_backward();
}

void EngineImpl::step() {
  check_states_resident("step");
  const bool boundary = is_boundary();
  observers_.begin_step();
  const int64_t iteration = micro_steps_;
  ++micro_steps_;
  iterations_->run(iteration, boundary);  // the optimizer step at a window's end, and what the schedule adds
  if (boundary) {
    // The loss observers get: this rank's mean over the step's micro-batches, as DeepSpeed logs it.
    const double step_loss = step_loss_count_ > 0 && step_loss_sum_.defined()
                                 ? step_loss_sum_.item<double>() / static_cast<double>(step_loss_count_)
                                 : 0.0;
    step_loss_sum_ = at::Tensor();
    step_loss_count_ = 0;
    observers_.on_report(step_report(step_loss));
  }
  observers_.end_step(boundary, global_steps_);
}

bool EngineImpl::is_boundary() const { return iterations_->ends_window(micro_steps_); }

void EngineImpl::boundary_step() {
  DS_CHECK(optimizer_ != nullptr, "step: no optimizer (the config has no `optimizer` section and none was passed "
                                  "to initialize)");
  if (breakdown_) timers_.start("step");
  const bool stepped = take_model_step();
  if (stepped && scheduler_) {
    scheduler_->step();
    apply_schedule();
  }
  stage_->zero_grads();
  ++global_steps_;
  if (breakdown_) timers_.stop("step");
}

void EngineImpl::land_overlapped_step() {
  if (!step_->land()) return;
  iterations_->after_publish();  // the publish wrote the masters' values over what the schedule holds apart
  if (schedule_pending_) {
    schedule_pending_ = false;
    apply_schedule();
  }
}

bool EngineImpl::take_model_step() {
  land_overlapped_step();  // the previous step's update, before its gradient copies are overwritten
  step_->finish_started();  // what the backward started finishes before anything reads what it wrote
  std::vector<at::Tensor> grads = stage_->step_grads();  // offload: the CPU optimizer reads host copies
  // A window whose length was not known in advance: its mean gradient (step() counted the iteration already).
  double unscale = 1.0 / static_cast<double>(iterations_->gradient_divisor(micro_steps_ - 1));
  if (scaler_) {
    // The scale that produced these gradients; update() may grow it for the next window.
    const double used_scale = scaler_->loss_scale();
    auto overflow = stage_->first_overflow(grads);
    std::string name = overflow ? parameter_name(overflow->first, overflow->second) : "";
    // Every part of the model replica skips or steps together.
    const bool any_overflow = agree_overflow(overflow.has_value());
    if (any_overflow && !overflow) name = "a parameter of another model-parallel rank";
    if (scaler_->update(any_overflow, name)) {
      step_->skip_started();  // the step is skipped: so is what the backward started
      if (comm::get_rank() == 0) {
        std::printf("%s\n", scaler_->last_message().c_str());
        std::fflush(stdout);
      }
      if (config_.zero.compute_grad_norm) global_grad_norm_ = std::numeric_limits<double>::infinity();
      return false;
    }
    unscale /= used_scale;
  }
  // zero_optimization.compute_grad_norm false: no norm, and none is needed (the config gate refuses clipping).
  if (config_.zero.compute_grad_norm) {
    global_grad_norm_ = layout_.model_parallel.is_member() ? replica_grad_norm(grads) * unscale
                       : stage_->global_norm(grads) * unscale;
  } else {
    DS_ASSERT(config_.gradient_clipping == 0.0, "clipping without a gradient norm (the config gate refuses it)");
  }
  if (nonfinite_ &&
      nonfinite_->skip(config_.zero.compute_grad_norm ? std::optional<double>(global_grad_norm_) : std::nullopt,
                       [&] { return agree_overflow(stage_->first_overflow(grads).has_value()); })) {
    step_->skip_started();  // as fp16's overflow: nothing moves
    return false;
  }
  double coef = unscale;
  const double clip = config_.gradient_clipping;
  if (clip > 0.0) {
    const double clip_coef = clip / (global_grad_norm_ + 1e-6);
    if (clip_coef < 1.0) coef *= clip_coef;
  }
  if (step_->accept_started(coef, unscale, global_grad_norm_)) return true;  // what the backward started stands
  step_->run(std::move(grads), coef);  // however this configuration runs it (runtime/optimizer_step.h)
  return true;
}

std::string EngineImpl::parameter_name(size_t group, size_t index) const {
  const at::Tensor& p = groups_.at(group).params.at(index);
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    if (item.value().unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return item.key();
  return "group " + std::to_string(group) + " parameter " + std::to_string(index);
}

void EngineImpl::apply_schedule() {
  if (step_->pending()) {  // the running step reads the optimizer's hyperparameters
    schedule_pending_ = true;
    return;
  }
  const auto& lrs = scheduler_->get_lr();
  for (size_t g = 0; g < lrs.size() && g < groups_.size(); ++g) optimizer_->set_lr(g, lrs[g]);
  if (const auto& mom = scheduler_->get_momentum()) {
    for (size_t g = 0; g < mom->size() && g < groups_.size(); ++g) optimizer_->set_momentum(g, (*mom)[g]);
  }
}

std::vector<double> EngineImpl::get_lr() const {
  if (schedule_pending_) return scheduler_->get_lr();  // what the next step will use
  std::vector<double> lrs;
  if (optimizer_)
    for (size_t g = 0; g < groups_.size(); ++g) lrs.push_back(optimizer_->lr(g));
  return lrs;
}

std::vector<at::Tensor> EngineImpl::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

ModelStateBytes EngineImpl::model_state_bytes() const {
  const zero::StageBytes sb = stage_->bytes();
  ModelStateBytes b;
  b.params = sb.params;
  b.gradients = sb.gradients;
  b.master_weights = sb.master_copies;
  b.optimizer_states = step_->resident_state_bytes();  // where the states stream through a pool: the pool
  b.working_buffers = sb.working;
  if (sb.offloaded) b.offloaded_to_host = b.master_weights + b.optimizer_states + sb.host_grads;
  b.offloaded_to_host += sb.host_params;
  return b;
}

}  // namespace deepspeed
