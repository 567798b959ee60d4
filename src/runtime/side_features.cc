#include "runtime/side_features.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "deepspeed/comm.h"
#include "runtime/autotuning_probe.h"
#include "runtime/memory_observer.h"
#include "runtime/monitor_observer.h"
#include "runtime/profiler_observer.h"

namespace deepspeed::runtime {

void add_side_features(StepObservers& observers, const SideFeatureParts& parts) {
  const Config& config = *parts.config;
  const int rank = comm::get_rank();
  // memory_breakdown: DeepSpeed's see_memory_usage prints on global rank 0 only; its "before" points come first and
  // its "after" points last (below), outside what the other observers time.
  const bool memory = config.memory_breakdown && rank == 0;
  auto memory_observer = [](MemoryObserver::Points side) {
    return std::make_unique<MemoryObserver>(
        accelerator_counters(),
        [](const std::string& s) {
          std::fputs(s.c_str(), stdout);
          std::fflush(stdout);
        },
        side);
  };
  if (memory) observers.add(memory_observer(MemoryObserver::Points::kBefore));
  ConsoleOptions console;
  console.writer = rank == 0;
  console.steps_per_print = config.steps_per_print;
  console.total_steps = parts.total_steps;
  console.tokens_per_sample = parts.tokens_per_sample;
  console.samples_per_step = config.train_batch_size.value();
  // (Not with memory_breakdown, whose lines would break into the bar's line.)
  console.progress_bar = rank == 0 && !config.memory_breakdown &&
                         progress_bar_wanted(::isatty(STDOUT_FILENO) == 1);
  observers.add(std::make_unique<ConsoleObserver>(console, parts.log_line));
  observers.add(MonitorObserver::create(config, rank, config.train_batch_size.value(), parts.tokens_per_sample));

  if (config.flops_profiler.enabled && rank == 0) {  // DeepSpeed profiles on global rank 0 only
    profiling::TrainingInfo sizes;
    sizes.world_size = comm::get_world_size();
    sizes.dp_world_size = config.dp_world_size;
    sizes.mp_world_size = parts.model_parallel_size;
    sizes.micro_batch_size = config.train_micro_batch_size_per_gpu.value();
    sizes.samples_per_iter = config.train_batch_size.value();
    auto profiler = std::make_unique<profiling::StepProfiler>(parts.module, config.flops_profiler, sizes);
    if (parts.partitioned_parameters) {
      // Released parameters are empty between uses: count their full shapes (DeepSpeed's ds_numel).
      auto full = std::make_shared<const FullNumels>(parts.full_numels());
      profiler->set_parameter_numel([full](const at::Tensor& p) {
        auto it = full->find(p.unsafeGetTensorImpl());
        return it == full->end() ? p.numel() : it->second;
      });
    }
    observers.add(std::make_unique<ProfilerObserver>(std::move(profiler)));
  }

  // Runs started by the autotuner report their speed and the model's size.
  auto probe = AutotuningProbe::create(config.autotuning, config.train_batch_size.value(), rank == 0,
                                                parts.module);
  if (probe) {
    // Every parameter of the model, frozen ones too (they take memory), at its full size (ZeRO-3
    // holds partitions); the trainable ones are those in the optimizer's groups.
    const FullNumels full = parts.full_numels();
    int64_t trainable = 0;
    for (const auto& [impl, n] : full) trainable += n;
    int64_t total = 0;
    for (const auto& p : parts.module->parameters()) {
      auto it = full.find(p.unsafeGetTensorImpl());
      total += it != full.end() ? it->second : p.numel();
    }
    probe->report_model_info(total, trainable);
    observers.add(std::move(probe));
  }
  if (memory) observers.add(memory_observer(MemoryObserver::Points::kAfter));
}

}  // namespace deepspeed::runtime
