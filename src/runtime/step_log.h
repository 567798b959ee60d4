// The line rank 0 prints every `steps_per_print` steps, the same for the engine and the pipeline engine:
//   step 20/100 (20%) | loss 2.3100 | lr [0.001] | grad_norm 0.8123 | loss_scale 1024 | skipped 0 | 12.5 samples/s
//   | 3200 tokens/s | ETA 1m 4s
// (one line; grad_norm and the parts after it appear when they apply), and the window of steps and wall time one
// line covers.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::runtime {

struct StepLine {
  int64_t step = 0;
  int64_t total_steps = 0;  // 0: unknown (no percentage, no ETA)
  double loss = 0.0;
  std::vector<double> lrs;
  double grad_norm = 0.0;
  std::optional<double> loss_scale;  // fp16 only, with skipped_steps
  int64_t skipped_steps = 0;
  double samples_per_sec = 0.0;
  int64_t tokens_per_sample = 0;  // 0: no tokens/s
  double trained_tokens_per_sec = -1;  // >= 0: the tokens that trained (StepReport::trained_tokens), not the above
  double seconds_per_step = 0.0;  // of the window, for the ETA
  std::string extra;              // what only one engine reports, e.g. "stage 0 idle 12%"
};

// The line, without a newline.
std::string format_step_line(const StepLine& line);

// The steps and wall time since the previous log line.
class LogWindow {
 public:
  struct Span {
    int64_t steps = 0;
    double seconds = 0.0;
  };
  // Closes the window at `global_steps` and opens the next one there.
  Span close(int64_t global_steps);
  // Opens a fresh window at `global_steps` (after a checkpoint load).
  void restart(int64_t global_steps);

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t start_step_ = 0;
};

}  // namespace deepspeed::runtime
