#include "runtime/step_log.h"

#include <algorithm>
#include <cstdio>

#include "runtime/progress.h"

namespace deepspeed::runtime {

std::string format_step_line(const StepLine& l) {
  char buf[96];
  std::string out = "step " + std::to_string(l.step);
  if (l.total_steps > 0) {
    std::snprintf(buf, sizeof(buf), "/%lld (%.0f%%)", static_cast<long long>(l.total_steps),
                  100.0 * static_cast<double>(l.step) / static_cast<double>(l.total_steps));
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), " | loss %.4f | lr [", l.loss);
  out += buf;
  for (size_t i = 0; i < l.lrs.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.4g", i == 0 ? "" : ",", l.lrs[i]);
    out += buf;
  }
  out += "]";
  if (!(l.grad_norm < 0)) {  // -1: not computed (zero_optimization.compute_grad_norm false)
    std::snprintf(buf, sizeof(buf), " | grad_norm %.4f", l.grad_norm);
    out += buf;
  }
  if (l.loss_scale) {
    std::snprintf(buf, sizeof(buf), " | loss_scale %g | skipped %lld", *l.loss_scale,
                  static_cast<long long>(l.skipped_steps));
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), " | %.1f samples/s", l.samples_per_sec);
  out += buf;
  if (l.trained_tokens_per_sec >= 0 || l.tokens_per_sample > 0) {
    std::snprintf(buf, sizeof(buf), " | %.0f tokens/s",
                  l.trained_tokens_per_sec >= 0 ? l.trained_tokens_per_sec
                                                : l.samples_per_sec * static_cast<double>(l.tokens_per_sample));
    out += buf;
  }
  if (!l.extra.empty()) out += " | " + l.extra;
  // From this window's pace: (steps left) x (seconds per step).
  if (l.total_steps > 0 && l.seconds_per_step > 0)
    out += " | ETA " + format_eta(static_cast<double>(std::max<int64_t>(0, l.total_steps - l.step)) *
                                  l.seconds_per_step);
  return out;
}

LogWindow::Span LogWindow::close(int64_t global_steps) {
  const auto now = std::chrono::steady_clock::now();
  Span s{global_steps - start_step_, std::chrono::duration<double>(now - start_).count()};
  start_ = now;
  start_step_ = global_steps;
  return s;
}

void LogWindow::restart(int64_t global_steps) {
  start_ = std::chrono::steady_clock::now();
  start_step_ = global_steps;
}

}  // namespace deepspeed::runtime
