// What the engine reports: the step observers it builds (console, monitors, flops profiler, autotuning probe), the
// StepReport they get after each optimizer step, its part of the log line and the wall_clock_breakdown table.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/engine_impl.h"
#include "runtime/side_features.h"
#include "zero/stage_features.h"

namespace deepspeed {

void EngineImpl::add_observers() {
  runtime::SideFeatureParts parts;
  parts.config = &config_;
  parts.module = module_;
  parts.total_steps = total_steps_;
  parts.tokens_per_sample = tokens_.tokens_per_sample();
  parts.model_parallel_size = layout_.model_parallel.is_member() ? layout_.model_parallel.size() : 1;
  parts.partitioned_parameters = zero::partitions_parameters(*stage_);
  parts.full_numels = [this] { return full_numels(); };
  parts.log_line = [this](const runtime::StepReport& last, double window_loss,
                          const runtime::LogWindow::Span& window) {
    return log_line_source_ ? log_line_source_(last, window_loss, window) : log_line_parts(window_loss, window.steps);
  };
  runtime::add_side_features(observers_, parts);
}

EngineImpl::FullNumels EngineImpl::full_numels() const {
  FullNumels full;
  const auto shapes = parameter_shapes();
  for (size_t g = 0; g < groups_.size() && g < shapes.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size() && i < shapes[g].size(); ++i)
      full[groups_[g].params[i].unsafeGetTensorImpl()] = c10::multiply_integers(shapes[g][i]);
  return full;
}

runtime::StepReport EngineImpl::step_report(double loss) {
  runtime::StepReport r;
  r.trained_tokens = tokens_.close_step(layout_.data_parallel);
  r.global_steps = global_steps_;
  r.global_samples = global_samples();
  r.loss = loss;
  r.lrs = get_lr();
  r.grad_norm = global_grad_norm_;
  if (scaler_) r.loss_scale = scaler_->loss_scale();
  r.skipped_steps = skipped_steps();
  return r;
}

int64_t EngineImpl::skipped_steps() const {
  return scaler_ ? scaler_->skipped_steps() : nonfinite_ ? nonfinite_->skipped_steps() : 0;
}

void EngineImpl::report_step(double loss) {
  observers_.on_report(step_report(loss));
}

runtime::LogLineParts EngineImpl::log_line_parts(double window_loss, int64_t window_steps) {
  // The mean loss across ranks over the logging window: one small all-reduce, at print steps only.
  at::Tensor loss = at::tensor({window_loss}, at::kDouble);
  if (layout_.data_parallel.size() > 1) layout_.data_parallel.all_reduce(loss, comm::ReduceOp::kAvg);
  runtime::LogLineParts parts;
  parts.loss = loss.item<double>();
  if (breakdown_) parts.table = breakdown_table_.next(timers_, *stage_, global_steps_, window_steps);
  return parts;
}

}  // namespace deepspeed
