// See console_observer.h.
#include "runtime/console_observer.h"

#include <algorithm>
#include <cstdio>

namespace deepspeed::runtime {

ConsoleObserver::ConsoleObserver(const ConsoleOptions& options, LogLineSource source)
    : options_(options), source_(std::move(source)) {
  if (options_.writer && options_.progress_bar && options_.total_steps > 0)
    bar_ = std::make_unique<ProgressBar>(options_.total_steps, options_.tokens_per_sample, options_.samples_per_step);
  window_.restart(0);
}

void ConsoleObserver::on_report(const StepReport& report) {
  loss_sum_ += report.loss;
  ++loss_count_;
  if (report.trained_tokens >= 0) trained_tokens_ = std::max<int64_t>(trained_tokens_, 0) + report.trained_tokens;
  if (options_.steps_per_print > 0 && report.global_steps % options_.steps_per_print == 0) print_line(report);
  if (bar_) bar_->on_step(report.global_steps, report.loss, report.trained_tokens);
}

void ConsoleObserver::on_resume(int64_t global_steps) {
  window_.restart(global_steps);  // the next line covers the steps after the load only
  loss_sum_ = 0.0;
  loss_count_ = 0;
  trained_tokens_ = -1;
}

void ConsoleObserver::print_line(const StepReport& report) {
  const LogWindow::Span window = window_.close(report.global_steps);
  const double window_loss = loss_count_ > 0 ? loss_sum_ / static_cast<double>(loss_count_) : 0.0;
  loss_sum_ = 0.0;
  loss_count_ = 0;
  const int64_t trained_tokens = trained_tokens_;
  trained_tokens_ = -1;
  const LogLineParts parts = source_(report, window_loss, window);  // every rank: it may run a collective
  if (!options_.writer) return;
  StepLine line;
  line.step = report.global_steps;
  line.total_steps = options_.total_steps;
  line.loss = parts.loss;
  line.lrs = report.lrs;
  line.grad_norm = report.grad_norm;
  line.loss_scale = report.loss_scale;
  line.skipped_steps = report.skipped_steps;
  const double samples = static_cast<double>(window.steps * options_.samples_per_step);
  line.samples_per_sec = window.seconds > 0 ? samples / window.seconds : 0.0;
  line.tokens_per_sample = options_.tokens_per_sample;
  if (trained_tokens >= 0 && window.seconds > 0)
    line.trained_tokens_per_sec = static_cast<double>(trained_tokens) / window.seconds;
  line.seconds_per_step = window.steps > 0 ? window.seconds / static_cast<double>(window.steps) : 0.0;
  line.extra = parts.extra;
  if (bar_) bar_->clear_line();
  std::printf("%s\n%s", format_step_line(line).c_str(), parts.table.c_str());
  std::fflush(stdout);
}

}  // namespace deepspeed::runtime
