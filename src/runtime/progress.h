// Training progress on rank 0: a single-line bar redrawn every step when stdout is a terminal, else
// nothing beyond the periodic step log (which carries the same step/total and ETA).
//
// A frame is written as the bar followed by '\r' (not preceded by it), so the cursor rests at the
// start of the bar's line: anything printed next starts there, and the engine prints "\x1b[K"
// (erase to the end of the line) before its own log lines. The launcher forwards such frames the
// same way (src/launcher/rank_output.h).
//
// When to draw: DS_PROGRESS=bar forces the bar, DS_PROGRESS=lines turns it off; otherwise it is
// drawn when stdout is a terminal, or when the launcher says its own stdout is one
// (DS_PROGRESS_TTY=1, set for ranks whose output it forwards to a terminal).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace deepspeed::runtime {

// "1h02m", "3m05s", "42s".
std::string format_eta(double seconds);

// The bar's text for `step` of `total` steps: "[#####.....]  40/200  20% | 12.5 samples/s | 3200
// tokens/s | step loss 2.3100 (rank 0) | ETA 1m05s". `tokens_per_sec` < 0 leaves the tokens out;
// `eta_seconds` < 0 prints "ETA ?". `loss` is rank 0's loss of that optimizer step (the mean of its
// micro-batches), labelled so as not to be read as the step line's loss, which is the mean over
// the steps_per_print window and all ranks.
std::string format_progress_bar(int64_t step, int64_t total, double samples_per_sec,
                                double tokens_per_sec, double loss, double eta_seconds,
                                int bar_width = 24);

// Whether this process should draw the bar (see above); `stdout_is_tty` is isatty(stdout).
bool progress_bar_wanted(bool stdout_is_tty);

class ProgressBar {
 public:
  // `total` optimizer steps (the bar needs it); `tokens_per_sample` 0: no tokens/s.
  ProgressBar(int64_t total, int64_t tokens_per_sample, int64_t samples_per_step);

  // After optimizer step `step` (1-based): redraws at most every 0.2 s, and always at the last
  // step, which ends the line. Rates and the ETA are averaged from the first step on (the first
  // step, with its warm-up, excluded).
  // `trained_tokens`: the step's StepReport::trained_tokens (-1: not counted; tokens/s is then per sample).
  void on_step(int64_t step, double loss, int64_t trained_tokens = -1);
  // Erases the bar before a log line is printed (cursor at the line's start already); the next step
  // redraws it below that line whatever the time since the last frame.
  void clear_line();

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_, tokens_per_sample_, samples_per_step_;
  int64_t first_step_ = -1;
  int64_t trained_tokens_ = -1;  // since the first step (-1: not counted)
  Clock::time_point first_time_, last_draw_;
  bool drawn_ = false;
  bool cleared_ = false;
  bool finished_ = false;
};

}  // namespace deepspeed::runtime
