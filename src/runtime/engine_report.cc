// What the engine reports: the step observers it builds (console, monitors, flops profiler, autotuning probe), the
// StepReport they get after each optimizer step, its part of the log line and the wall_clock_breakdown table.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/autotuning_probe.h"
#include "runtime/engine_impl.h"
#include "runtime/memory_observer.h"
#include "runtime/monitor_observer.h"
#include "runtime/profiler_observer.h"

namespace deepspeed {

void EngineImpl::add_observers() {
  const int rank = comm::get_rank();
  // memory_breakdown: DeepSpeed's see_memory_usage prints on global rank 0 only; its "before" points come first and
  // its "after" points last (below), outside what the other observers time.
  const bool memory = config_.memory_breakdown && rank == 0;
  auto memory_observer = [](runtime::MemoryObserver::Points side) {
    return std::make_unique<runtime::MemoryObserver>(
        runtime::accelerator_counters(),
        [](const std::string& s) {
          std::fputs(s.c_str(), stdout);
          std::fflush(stdout);
        },
        side);
  };
  if (memory) observers_.add(memory_observer(runtime::MemoryObserver::Points::kBefore));
  runtime::ConsoleOptions console;
  console.writer = rank == 0;
  console.steps_per_print = config_.steps_per_print;
  console.total_steps = total_steps_;
  console.tokens_per_sample = tokens_per_sample_;
  console.samples_per_step = config_.train_batch_size.value();
  // (Not with memory_breakdown, whose lines would break into the bar's line.)
  console.progress_bar = rank == 0 && !config_.memory_breakdown &&
                         runtime::progress_bar_wanted(::isatty(STDOUT_FILENO) == 1);
  observers_.add(std::make_unique<runtime::ConsoleObserver>(
      console, [this](const runtime::StepReport& last, double window_loss, const runtime::LogWindow::Span& window) {
        return log_line_source_ ? log_line_source_(last, window_loss, window)
                                : log_line_parts(window_loss, window.steps);
      }));
  observers_.add(runtime::MonitorObserver::create(config_, rank, config_.train_batch_size.value(), tokens_per_sample_));

  if (config_.flops_profiler.enabled && rank == 0) {  // DeepSpeed profiles on global rank 0 only
    profiling::TrainingInfo sizes;
    sizes.world_size = comm::get_world_size();
    sizes.dp_world_size = config_.dp_world_size;
    sizes.mp_world_size = model_parallel_.is_member() ? model_parallel_.size() : 1;
    sizes.micro_batch_size = config_.train_micro_batch_size_per_gpu.value();
    sizes.samples_per_iter = config_.train_batch_size.value();
    auto profiler = std::make_unique<profiling::StepProfiler>(module_, config_.flops_profiler, sizes);
    if (stage_->partitions_parameters()) {
      // Released parameters are empty between uses: count their full shapes (DeepSpeed's ds_numel).
      auto full = std::make_shared<const FullNumels>(full_numels());
      profiler->set_parameter_numel([full](const at::Tensor& p) {
        auto it = full->find(p.unsafeGetTensorImpl());
        return it == full->end() ? p.numel() : it->second;
      });
    }
    observers_.add(std::make_unique<runtime::ProfilerObserver>(std::move(profiler)));
  }

  // Runs started by the autotuner report their speed and the model's size.
  auto probe = runtime::AutotuningProbe::create(config_.autotuning, config_.train_batch_size.value(), rank == 0,
                                                module_);
  if (probe) {
    // Every parameter of the model, frozen ones too (they take memory), at its full size (ZeRO-3
    // holds partitions); the trainable ones are those in the optimizer's groups.
    const FullNumels full = full_numels();
    int64_t trainable = 0;
    for (const auto& [impl, n] : full) trainable += n;
    int64_t total = 0;
    for (const auto& p : module_->parameters()) {
      auto it = full.find(p.unsafeGetTensorImpl());
      total += it != full.end() ? it->second : p.numel();
    }
    probe->report_model_info(total, trainable);
    observers_.add(std::move(probe));
  }
  if (memory) observers_.add(memory_observer(runtime::MemoryObserver::Points::kAfter));
}

EngineImpl::FullNumels EngineImpl::full_numels() const {
  FullNumels full;
  const auto shapes = parameter_shapes();
  for (size_t g = 0; g < groups_.size() && g < shapes.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size() && i < shapes[g].size(); ++i)
      full[groups_[g].params[i].unsafeGetTensorImpl()] = c10::multiply_integers(shapes[g][i]);
  return full;
}

runtime::StepReport EngineImpl::step_report(double loss) const {
  runtime::StepReport r;
  r.global_steps = global_steps_;
  r.global_samples = global_samples();
  r.loss = loss;
  r.lrs = get_lr();
  r.grad_norm = global_grad_norm_;
  if (scaler_) {
    r.loss_scale = scaler_->loss_scale();
    r.skipped_steps = scaler_->skipped_steps();
  }
  return r;
}

void EngineImpl::report_step(double loss) {
  observers_.on_report(step_report(loss));
}

runtime::LogLineParts EngineImpl::log_line_parts(double window_loss, int64_t window_steps) {
  // The mean loss across ranks over the logging window: one small all-reduce, at print steps only.
  at::Tensor loss = at::tensor({window_loss}, at::kDouble);
  if (world_.size() > 1) world_.all_reduce(loss, comm::ReduceOp::kAvg);
  runtime::LogLineParts parts;
  parts.loss = loss.item<double>();
  if (breakdown_) parts.table = timer_table(window_steps);
  return parts;
}

std::string EngineImpl::timer_table(int64_t steps) {
  // Backward's reduction share: time the reducer kept backward waiting (stages 0-2), or stage 3's waits for its
  // gradient reductions; both are cumulative counters, read as the difference since the last table.
  const zero::Stage3Stats s3 = stage_->stats();
  const double reduce_total = stage_->reduce_blocked_ms();
  const double reduce = reduce_total - logged_waits_.reduce_wait_ms;
  const double fwd = timers_.elapsed_ms("fwd"), bwd = timers_.elapsed_ms("bwd"), step = timers_.elapsed_ms("step");
  std::vector<runtime::TimerRow> rows = {{"forward", fwd, 0},
                                         {"backward", bwd, 0},
                                         {"compute", std::max(0.0, bwd - reduce), 1},
                                         {"reduce (blocked)", reduce, 1},
                                         {"step", step, 0}};
  if (stage_->partitions_parameters()) {
    // Parts of forward and backward: gathers of parameters needed at once, and what prefetching did not hide.
    rows.push_back({"stage 3 gather (on demand, in fwd/bwd)", s3.gather_ms - logged_waits_.gather_ms, 0});
    rows.push_back({"stage 3 prefetch wait (in fwd/bwd)", s3.prefetch_wait_ms - logged_waits_.prefetch_wait_ms, 0});
  }
  logged_waits_ = s3;
  logged_waits_.reduce_wait_ms = reduce_total;
  timers_.reset();
  return runtime::format_timer_table(rows, global_steps_, steps, fwd + bwd + step);
}

}  // namespace deepspeed
