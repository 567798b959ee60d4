// The monitors' events after each optimizer step (monitor/monitor.h writes them: tensorboard, csv), with
// DeepSpeed's names and x-axis (the report's global_samples): Train/Samples/train_loss, lr, loss_scale (fp16), grad_norm,
// samples_per_sec, tokens_per_sec, memory_allocated_mb. Global rank 0 writes; other ranks have no writers.
#pragma once

#include <chrono>
#include <cstdint>

#include "deepspeed/config.h"
#include "monitor/monitor.h"
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

class MonitorObserver : public StepObserver {
 public:
  // Null when `config` enables no monitor on this rank.
  static std::unique_ptr<MonitorObserver> create(const config::Config& config, int rank, int64_t samples_per_step,
                                                 int64_t tokens_per_sample);
  MonitorObserver(std::unique_ptr<monitor::MonitorMaster> master, int64_t samples_per_step,
                  int64_t tokens_per_sample);

  void on_report(const StepReport& report) override;
  void on_resume(int64_t global_steps) override;

 private:
  std::unique_ptr<monitor::MonitorMaster> master_;
  int64_t samples_per_step_;
  int64_t tokens_per_sample_;
  std::chrono::steady_clock::time_point last_step_time_ = std::chrono::steady_clock::now();
};

}  // namespace deepspeed::runtime
