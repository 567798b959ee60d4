#include "runtime/loss_scaler.h"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

// Scales are powers of two in practice; print them as integers like DeepSpeed's log does, but keep
// fractions (a min_loss_scale of 0.5 is legal) readable.
std::string format_scale(double scale) {
  std::ostringstream os;
  if (scale == std::floor(scale) && std::fabs(scale) < 1e18) {
    os << static_cast<int64_t>(scale);
  } else {
    os << scale;
  }
  return os.str();
}

std::string describe_gradient(const std::string& param) {
  return param.empty() ? std::string("a gradient") : "gradient of '" + param + "'";
}

}  // namespace

void validate(const LossScalerOptions& o) {
  DS_CHECK_T(ConfigError, std::isfinite(o.loss_scale) && o.loss_scale >= 0,
             "fp16.loss_scale must be 0 (dynamic) or a positive static scale, got ", o.loss_scale);
  DS_CHECK_T(ConfigError, o.initial_scale_power >= 0 && o.initial_scale_power <= 64,
             "fp16.initial_scale_power must be in [0, 64] (initial scale 2^power), got ",
             o.initial_scale_power);
  DS_CHECK_T(ConfigError, o.loss_scale_window >= 1, "fp16.loss_scale_window must be >= 1, got ",
             o.loss_scale_window);
  DS_CHECK_T(ConfigError, o.hysteresis >= 1, "fp16.hysteresis must be >= 1, got ", o.hysteresis);
  DS_CHECK_T(ConfigError, std::isfinite(o.min_loss_scale) && o.min_loss_scale > 0,
             "fp16.min_loss_scale must be > 0, got ", o.min_loss_scale);
  DS_CHECK_T(ConfigError, std::isfinite(o.scale_factor) && o.scale_factor > 1,
             "loss scaler scale_factor must be > 1, got ", o.scale_factor);
  if (o.loss_scale == 0) {
    const double initial = std::ldexp(1.0, o.initial_scale_power);
    DS_CHECK_T(ConfigError, initial >= o.min_loss_scale, "fp16.initial_scale_power ",
               o.initial_scale_power, " starts the dynamic scale at ", format_scale(initial),
               ", below fp16.min_loss_scale ", o.min_loss_scale);
  }
}

LossScaler::LossScaler(const LossScalerOptions& options)
    : options_(options), dynamic_(options.loss_scale == 0), cur_hysteresis_(options.hysteresis) {
  validate(options_);
  cur_scale_ = dynamic_ ? std::ldexp(1.0, options_.initial_scale_power) : options_.loss_scale;
}

bool LossScaler::update(bool overflow, const std::string& overflow_param) {
  if (!overflow) {
    if (dynamic_) {
      if (options_.consecutive_hysteresis) cur_hysteresis_ = options_.hysteresis;
      if ((cur_iter_ - last_overflow_iter_) % options_.loss_scale_window == 0) {
        if (!options_.consecutive_hysteresis) cur_hysteresis_ = options_.hysteresis;
        cur_scale_ *= options_.scale_factor;
      }
    }
    ++cur_iter_;
    return false;
  }

  std::ostringstream msg;
  msg << "OVERFLOW! skipping step " << cur_iter_ << ": " << describe_gradient(overflow_param)
      << " is inf/nan; loss scale ";
  if (!dynamic_) {
    msg << format_scale(cur_scale_) << " (static, unchanged)";
  } else if (cur_hysteresis_ <= 1) {
    // Checked before any state changes so that a caller who catches the error sees the scaler as it
    // was.
    DS_CHECK(!(cur_scale_ == options_.min_loss_scale && options_.raise_error_at_min_scale),
             "fp16 loss scale is already at min_loss_scale ", format_scale(options_.min_loss_scale),
             ": ", describe_gradient(overflow_param), " overflowed again at step ", cur_iter_,
             "; lower fp16.min_loss_scale, lower the learning rate, or look for the source of the "
             "inf/nan (bf16 avoids loss scaling)");
    const double next = std::max(cur_scale_ / options_.scale_factor, options_.min_loss_scale);
    msg << format_scale(cur_scale_) << " -> " << format_scale(next);
    cur_scale_ = next;
  } else {
    msg << format_scale(cur_scale_) << " kept (hysteresis " << cur_hysteresis_ << " -> "
        << cur_hysteresis_ - 1 << ")";
    --cur_hysteresis_;
  }
  last_overflow_iter_ = cur_iter_;
  ++cur_iter_;
  ++skipped_steps_;
  last_message_ = msg.str();
  return true;
}

LossScaler::State LossScaler::state() const {
  State s;
  s.cur_scale = cur_scale_;
  s.cur_iter = cur_iter_;
  s.last_overflow_iter = last_overflow_iter_;
  s.cur_hysteresis = cur_hysteresis_;
  s.skipped_steps = skipped_steps_;
  return s;
}

void LossScaler::check_state(const State& s) const {
  DS_CHECK(std::isfinite(s.cur_scale) && s.cur_scale > 0,
           "loss scaler state: cur_scale must be finite and > 0, got ", s.cur_scale);
  DS_CHECK(s.cur_iter >= 0, "loss scaler state: cur_iter must be >= 0, got ", s.cur_iter);
  DS_CHECK(s.last_overflow_iter >= -1 && s.last_overflow_iter < s.cur_iter,
           "loss scaler state: last_overflow_iter ", s.last_overflow_iter,
           " must be -1 or an earlier step than cur_iter ", s.cur_iter);
  DS_CHECK(s.cur_hysteresis >= 1 && s.cur_hysteresis <= options_.hysteresis,
           "loss scaler state: cur_hysteresis ", s.cur_hysteresis,
           " is outside [1, fp16.hysteresis ", options_.hysteresis, "]");
  DS_CHECK(s.skipped_steps >= 0 && s.skipped_steps <= s.cur_iter,
           "loss scaler state: skipped_steps ", s.skipped_steps, " must be in [0, cur_iter ",
           s.cur_iter, "]");
}

void LossScaler::load_state(const State& s) {
  check_state(s);
  cur_scale_ = s.cur_scale;
  cur_iter_ = s.cur_iter;
  last_overflow_iter_ = s.last_overflow_iter;
  cur_hysteresis_ = s.cur_hysteresis;
  skipped_steps_ = s.skipped_steps;
}

}  // namespace deepspeed::runtime
