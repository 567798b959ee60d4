#include "profiling/step_profiler.h"

#include <utility>

#include "deepspeed/accelerator.h"

namespace deepspeed::profiling {

StepProfiler::StepProfiler(std::shared_ptr<torch::nn::Module> module,
                           const config::FlopsProfilerConfig& config, TrainingInfo sizes)
    : profiler_(std::move(module), config.recompute_fwd_factor), config_(config), info_(sizes) {}

double StepProfiler::since(Clock::time_point start) const {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Only on the profiled step: device work issued so far counts where it was issued (as DeepSpeed's
// hooks synchronize), not where some later call happens to wait for it.
void StepProfiler::sync() const { accelerator::get_accelerator().synchronize(); }

// A forward that threw never reached end_forward: stop counting before backward or step operators
// are taken for forward ones.
void StepProfiler::stop_leftover_forward() {
  if (profiler_.running()) profiler_.stop_profile();
}

void StepProfiler::begin_forward(int64_t global_steps) {
  if (!in_step_) {
    if (global_steps != config_.profile_step) return;
    in_step_ = true;
    info_.fwd_latency = info_.bwd_latency = info_.step_latency = 0;
    profiler_.start_profile();
  } else if (!profiler_.running()) {
    profiler_.continue_profile();  // the step's next micro-batch adds to the count
  }
  sync();
  fwd_start_ = Clock::now();
}

void StepProfiler::end_forward() {
  if (!in_step_ || !profiler_.running()) return;
  sync();
  info_.fwd_latency += since(fwd_start_);
  profiler_.stop_profile();
}

void StepProfiler::begin_backward() {
  if (!in_step_) return;
  stop_leftover_forward();
  sync();
  bwd_start_ = Clock::now();
}

void StepProfiler::end_backward() {
  if (!in_step_) return;
  sync();
  info_.bwd_latency += since(bwd_start_);
}

void StepProfiler::begin_step() {
  if (!in_step_) return;
  stop_leftover_forward();
  sync();
  step_start_ = Clock::now();
}

void StepProfiler::end_step(bool boundary, int64_t global_steps) {
  if (!in_step_) return;
  sync();
  info_.step_latency += since(step_start_);
  if (!boundary) return;
  PrintOptions print;
  print.profile_step = global_steps;
  print.module_depth = config_.module_depth;
  print.top_modules = config_.top_modules;
  print.detailed = config_.detailed;
  print.output_file = config_.output_file;
  print.training = info_;
  profiler_.stop_profile();
  profiler_.print_model_profile(print);
  profiler_.end_profile();
  in_step_ = false;
}

}  // namespace deepspeed::profiling
