// What a training run prints: rank 0's progress bar (progress.h) and, every `steps_per_print` steps, the log line
// (step_log.h) with the wall-clock breakdown table under it. The engine and the pipeline engine print the same line;
// what differs between them (how the loss is agreed over ranks, their breakdown tables, the pipeline's idle share)
// comes from the LogLineSource each engine gives.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/progress.h"
#include "runtime/step_log.h"
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

struct ConsoleOptions {
  bool writer = false;           // this rank prints (global rank 0)
  int64_t steps_per_print = 0;   // 0: no log line
  int64_t total_steps = 0;       // 0: unknown (no bar, no percentage, no ETA)
  int64_t tokens_per_sample = 0;  // 0: no tokens/s
  int64_t samples_per_step = 0;  // the global batch (train_batch_size)
  bool progress_bar = false;     // draw the bar (the writer, total_steps known, stdout a terminal)
};

// The engine's part of one log line, asked for on every rank at each print step (the engine averages the loss
// over ranks there, a collective).
struct LogLineParts {
  double loss = 0.0;
  std::string extra;  // StepLine::extra
  std::string table;  // printed under the line (wall_clock_breakdown), ends with a newline
};
// `window_loss`: this rank's mean of StepReport::loss over the steps since the last line; `window`: those steps and
// their wall time.
using LogLineSource =
    std::function<LogLineParts(const StepReport& last, double window_loss, const LogWindow::Span& window)>;

class ConsoleObserver : public StepObserver {
 public:
  ConsoleObserver(const ConsoleOptions& options, LogLineSource source);

  void on_report(const StepReport& report) override;
  void on_resume(int64_t global_steps) override;

 private:
  void print_line(const StepReport& report);

  ConsoleOptions options_;
  LogLineSource source_;
  std::unique_ptr<ProgressBar> bar_;
  LogWindow window_;
  double loss_sum_ = 0.0;  // StepReport::loss since the last line
  int64_t loss_count_ = 0;
  int64_t trained_tokens_ = -1;  // StepReport::trained_tokens since the last line (-1: not counted)
};

}  // namespace deepspeed::runtime
