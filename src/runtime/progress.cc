#include "runtime/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deepspeed::runtime {

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s % 3600 / 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  }
  return buf;
}

std::string format_progress_bar(int64_t step, int64_t total, double samples_per_sec,
                                double tokens_per_sec, double loss, double eta_seconds,
                                int bar_width) {
  const double done =
      total > 0 ? std::clamp(static_cast<double>(step) / static_cast<double>(total), 0.0, 1.0)
                : 0.0;
  const int filled = static_cast<int>(done * bar_width);
  std::string out = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(bar_width - filled), '.') + "] ";
  const int digits = static_cast<int>(std::to_string(total).size());
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%*lld/%lld %3.0f%% | %.1f samples/s", digits,
                static_cast<long long>(step), static_cast<long long>(total), 100.0 * done,
                samples_per_sec);
  out += buf;
  if (tokens_per_sec >= 0) {
    std::snprintf(buf, sizeof(buf), " | %.0f tokens/s", tokens_per_sec);
    out += buf;
  }
  // Labelled: this is one step on one rank, where the periodic step line's "loss" is the mean over
  // its steps_per_print window and every rank, so the two differ at the same step.
  std::snprintf(buf, sizeof(buf), " | step loss %.4f (rank 0) | ETA ", loss);
  out += buf;
  out += eta_seconds < 0 ? "?" : format_eta(eta_seconds);
  return out;
}

bool progress_bar_wanted(bool stdout_is_tty) {
  const char* mode = std::getenv("DS_PROGRESS");
  if (mode && std::strcmp(mode, "bar") == 0) return true;
  if (mode && std::strcmp(mode, "lines") == 0) return false;
  const char* forwarded = std::getenv("DS_PROGRESS_TTY");
  return stdout_is_tty || (forwarded && std::strcmp(forwarded, "1") == 0);
}

ProgressBar::ProgressBar(int64_t total, int64_t tokens_per_sample, int64_t samples_per_step)
    : total_(total), tokens_per_sample_(tokens_per_sample), samples_per_step_(samples_per_step) {}

void ProgressBar::on_step(int64_t step, double loss, int64_t trained_tokens) {
  const Clock::time_point now = Clock::now();
  if (first_step_ < 0) {
    first_step_ = step;
    first_time_ = now;
  } else if (trained_tokens >= 0) {
    trained_tokens_ = std::max<int64_t>(trained_tokens_, 0) + trained_tokens;  // the first step only starts the clock
  }
  const bool last = step >= total_;
  if (finished_) return;  // the bar ended at the last step; steps beyond `total` draw nothing
  if (drawn_ && !cleared_ && !last && now - last_draw_ < std::chrono::milliseconds(200)) return;
  const double seconds = std::chrono::duration<double>(now - first_time_).count();
  const int64_t steps = step - first_step_;
  const double steps_per_sec =
      steps > 0 && seconds > 0 ? static_cast<double>(steps) / seconds : 0.0;
  const double samples_per_sec = steps_per_sec * static_cast<double>(samples_per_step_);
  const double tokens_per_sec = trained_tokens_ >= 0
                                    ? (seconds > 0 ? static_cast<double>(trained_tokens_) / seconds : 0.0)
                                : tokens_per_sample_ > 0 ? samples_per_sec * static_cast<double>(tokens_per_sample_)
                                                         : -1;
  const double eta = steps_per_sec > 0 ? static_cast<double>(total_ - step) / steps_per_sec : -1.0;
  const std::string frame =
      format_progress_bar(step, total_, samples_per_sec, tokens_per_sec, loss, last ? 0.0 : eta) +
      "\x1b[K" + (last ? "\n" : "\r");
  std::fwrite(frame.data(), 1, frame.size(), stdout);
  std::fflush(stdout);
  drawn_ = !last;
  finished_ = last;
  cleared_ = false;
  last_draw_ = now;
}

void ProgressBar::clear_line() {
  if (!drawn_ || cleared_) return;
  std::fputs("\x1b[K", stdout);
  cleared_ = true;
}

}  // namespace deepspeed::runtime
