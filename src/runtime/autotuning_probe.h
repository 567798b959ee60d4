// What a training run started by the autotuner reports (DeepSpeed's engine does the same when its
// config has autotuning.enabled and a metric_path): the run's speed between start_profile_step and
// end_profile_step, written once as JSON to autotuning.metric_path by global rank 0:
//   {"throughput": samples/s, "latency": s per step, "FLOPS_per_gpu": flop/s, ...}
// and, when autotuning.model_info.profile is set, the model's size to autotuning.model_info_path at
// initialization: {"num_params": N, "trainable_num_params": T}. The run then trains on; the
// autotuner stops it once the file exists (deepspeed-cpp never exits from inside the library).
// Files are written with checkpoint's write_file_atomic, so a reader never sees half of one.
//
// The window opens after the first optimizer step at or past start_profile_step (a resumed run may
// start past it) and closes end_profile_step - start_profile_step steps later. FLOPS_per_gpu is
// counted only when autotuning.metric is "flops": the forwards of the step just before the window
// are counted at the operator level (profiling/flops_profiler.h; counting is slow, so outside the
// timed steps) and a training step is taken as 3 x its forward (backward ~ 2 x forward, DeepSpeed's
// estimate), divided by the measured latency. Not thread-safe: the engine's training thread calls
// it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "deepspeed/config.h"
#include "runtime/step_observer.h"

namespace torch::nn {
class Module;
}

namespace deepspeed::profiling {
class FlopsProfiler;
}

namespace deepspeed::runtime {

// A step observer (step_observer.h): it times forwards and steps as the engines report them.
class AutotuningProbe : public StepObserver {
 public:
  // Null when the config asks for nothing (autotuning disabled, or neither path set). `writer`:
  // this rank writes the files (global rank 0).
  static std::unique_ptr<AutotuningProbe> create(const config::AutotuningConfig& config,
                                                 int64_t train_batch_size, bool writer,
                                                 std::shared_ptr<torch::nn::Module> module);
  AutotuningProbe(const config::AutotuningConfig& config, int64_t train_batch_size, bool writer,
                  std::shared_ptr<torch::nn::Module> module);
  ~AutotuningProbe();

  // At initialization: the model's full parameter counts (at ZeRO-3, not the local partitions).
  void report_model_info(int64_t num_params, int64_t trainable_num_params);
  // Around each forward; `global_steps` = optimizer steps taken so far.
  void begin_forward(int64_t global_steps) override;
  void end_forward() override;
  // After each optimizer step, with the new step count.
  void on_report(const StepReport& report) override { after_step(report.global_steps); }
  void after_step(int64_t global_steps);

 private:
  void write_metrics(double seconds, int64_t steps);

  config::AutotuningConfig config_;
  int64_t train_batch_size_;
  bool writer_;
  std::shared_ptr<torch::nn::Module> module_;
  std::unique_ptr<profiling::FlopsProfiler> flops_;
  int64_t forward_flops_ = 0;  // of the counted step
  int64_t counting_step_ = -1;
  bool counting_ = false;
  bool forward_flops_counted_ = false;
  bool window_open_ = false;
  int64_t window_first_step_ = 0;
  bool done_ = false;
  std::chrono::steady_clock::time_point window_start_;
};

}  // namespace deepspeed::runtime
