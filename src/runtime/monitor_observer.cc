// See monitor_observer.h.
#include "runtime/monitor_observer.h"

#include <string>
#include <vector>

#include "deepspeed/accelerator.h"

namespace deepspeed::runtime {

std::unique_ptr<MonitorObserver> MonitorObserver::create(const config::Config& config, int rank,
                                                         int64_t samples_per_step, int64_t tokens_per_sample) {
  auto master = std::make_unique<monitor::MonitorMaster>(config, rank);
  if (!master->enabled()) return nullptr;
  return std::make_unique<MonitorObserver>(std::move(master), samples_per_step, tokens_per_sample);
}

MonitorObserver::MonitorObserver(std::unique_ptr<monitor::MonitorMaster> master, int64_t samples_per_step,
                                 int64_t tokens_per_sample)
    : master_(std::move(master)), samples_per_step_(samples_per_step), tokens_per_sample_(tokens_per_sample) {}

void MonitorObserver::on_report(const StepReport& report) {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_step_time_).count();
  last_step_time_ = now;
  const int64_t samples = report.global_samples;
  std::vector<monitor::Event> events;
  auto add = [&](const char* name, double value) {
    events.push_back({std::string("Train/Samples/") + name, value, samples});
  };
  add("train_loss", report.loss);
  if (!report.lrs.empty()) add("lr", report.lrs.front());
  if (report.loss_scale) add("loss_scale", *report.loss_scale);
  if (report.grad_norm >= 0) add("grad_norm", report.grad_norm);
  if (seconds > 0) {
    const double samples_per_sec = static_cast<double>(samples_per_step_) / seconds;
    add("samples_per_sec", samples_per_sec);
    if (report.trained_tokens >= 0)
      add("tokens_per_sec", static_cast<double>(report.trained_tokens) / seconds);
    else if (tokens_per_sample_ > 0)
      add("tokens_per_sec", samples_per_sec * static_cast<double>(tokens_per_sample_));
  }
  add("memory_allocated_mb",
      static_cast<double>(accelerator::get_accelerator().memory_stats().allocated_bytes) / (1024.0 * 1024.0));
  master_->write_events(events);
}

void MonitorObserver::on_resume(int64_t global_steps) { last_step_time_ = std::chrono::steady_clock::now(); }

}  // namespace deepspeed::runtime
