// What the engine reports at its boundaries: monitor events (DeepSpeed's names), the log line every
// steps_per_print steps (runtime/step_log.h) and the wall_clock_breakdown table.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "deepspeed/accelerator.h"
#include "runtime/engine_impl.h"

namespace deepspeed {

void EngineImpl::write_monitor_events(double loss) {
  // DeepSpeed's event names and step (global samples).
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - last_step_time_).count();
  last_step_time_ = now;
  const int64_t samples = global_steps_ * config_.train_batch_size.value();
  std::vector<monitor::Event> events;
  auto add = [&](const char* name, double value) { events.push_back({std::string("Train/Samples/") + name, value, samples}); };
  add("train_loss", loss);
  add("lr", get_lr().at(0));
  if (scaler_) add("loss_scale", scaler_->loss_scale());
  if (global_grad_norm_ >= 0) add("grad_norm", global_grad_norm_);
  if (seconds > 0) {
    const double samples_per_sec = static_cast<double>(config_.train_batch_size.value()) / seconds;
    add("samples_per_sec", samples_per_sec);
    if (tokens_per_sample_ > 0) add("tokens_per_sec", samples_per_sec * static_cast<double>(tokens_per_sample_));
  }
  add("memory_allocated_mb",
      static_cast<double>(accelerator::get_accelerator().memory_stats().allocated_bytes) / (1024.0 * 1024.0));
  monitor_->write_events(events);
}

void EngineImpl::log_step() {
  // The mean loss across ranks over the logging window: one small all-reduce, at print steps only.
  at::Tensor loss = at::tensor({loss_count_ > 0 ? loss_sum_ / loss_count_ : 0.0}, at::kDouble);
  if (world_.size() > 1) world_.all_reduce(loss, comm::ReduceOp::kAvg);
  loss_sum_ = 0.0;
  loss_count_ = 0;
  const runtime::LogWindow::Span window = log_window_.close(global_steps_);
  const std::string timers = breakdown_ ? timer_table(window.steps) : "";
  if (world_.rank() != 0) return;
  runtime::StepLine line;
  line.step = global_steps_;
  line.total_steps = total_steps_;
  line.loss = loss.item<double>();
  line.lrs = get_lr();
  line.grad_norm = global_grad_norm_;
  if (scaler_) {
    line.loss_scale = scaler_->loss_scale();
    line.skipped_steps = scaler_->skipped_steps();
  }
  const double samples = static_cast<double>(window.steps * config_.train_batch_size.value());
  line.samples_per_sec = window.seconds > 0 ? samples / window.seconds : 0.0;
  line.tokens_per_sample = tokens_per_sample_;
  line.seconds_per_step = window.steps > 0 ? window.seconds / static_cast<double>(window.steps) : 0.0;
  if (progress_) progress_->clear_line();
  std::printf("%s\n%s", runtime::format_step_line(line).c_str(), timers.c_str());
  std::fflush(stdout);
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
