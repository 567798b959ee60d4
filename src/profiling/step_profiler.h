// The engine's side of the `flops_profiler` config section, as DeepSpeed's engine runs it: on the
// rank that profiles (global rank 0), the forwards of the step that begins when global_steps ==
// profile_step are counted, summed over the step's micro-batches; its forward, backward and step()
// calls are timed; at the step's boundary the report is printed (labelled with the step count after
// it, as DeepSpeed labels it) and the profile ends.
//
// Thread-safety: called by the engine, on the engine's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include "deepspeed/config/feature_config.h"
#include "deepspeed/profiling/flops_profiler.h"

namespace deepspeed::profiling {

class StepProfiler {
 public:
  // `sizes`: world, data- and model-parallel sizes, micro-batch size and samples per step;
  // latencies are filled in here.
  StepProfiler(std::shared_ptr<torch::nn::Module> module, const config::FlopsProfilerConfig& config,
               TrainingInfo sizes);

  // Around the engine's forward; `global_steps` = optimizer steps completed so far.
  void begin_forward(int64_t global_steps);
  void end_forward();
  void begin_backward();
  void end_backward();
  // Around step(); `boundary`: it updated the model, and `global_steps` counts that update.
  void begin_step();
  void end_step(bool boundary, int64_t global_steps);
  // See FlopsProfiler::set_parameter_numel (ZeRO-3's partitioned parameters).
  void set_parameter_numel(FlopsProfiler::ParameterNumel numel) {
    profiler_.set_parameter_numel(std::move(numel));
  }

 private:
  using Clock = std::chrono::steady_clock;
  double since(Clock::time_point start) const;
  void sync() const;
  void stop_leftover_forward();

  FlopsProfiler profiler_;
  config::FlopsProfilerConfig config_;
  TrainingInfo info_;
  bool in_step_ = false;
  Clock::time_point fwd_start_, bwd_start_, step_start_;
};

}  // namespace deepspeed::profiling
