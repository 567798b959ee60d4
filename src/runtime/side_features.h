// The side features every training step feeds, as step observers (step_observer.h), built from the config in the
// order they run: memory_breakdown's "before" points, the console (log line and progress bar), the monitors, the
// flops profiler, the autotuner's probe, memory_breakdown's "after" points.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "deepspeed/config.h"
#include "runtime/console_observer.h"
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

// Each trainable parameter's full element count by its TensorImpl (ZeRO-3 leaves released parameters empty).
using FullNumels = std::unordered_map<const c10::TensorImpl*, int64_t>;

struct SideFeatureParts {
  const Config* config = nullptr;
  std::shared_ptr<torch::nn::Module> module;
  int64_t total_steps = 0;         // InitializeOptions::total_steps (the progress bar's end)
  int64_t tokens_per_sample = 0;   // InitializeOptions::tokens_per_sample
  int model_parallel_size = 1;     // the flops profiler's mp_world_size
  bool partitioned_parameters = false;  // parameters are released between uses: count their full sizes
  std::function<FullNumels()> full_numels;
  LogLineSource log_line;  // the engine's part of the console's log line
};

void add_side_features(StepObservers& observers, const SideFeatureParts& parts);

}  // namespace deepspeed::runtime
