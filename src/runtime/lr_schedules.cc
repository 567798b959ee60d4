// DeepSpeed's LR schedules (deepspeed/runtime/lr_schedules.py): parameter checks and the
// closed-form lr / momentum of each schedule as a function of last_batch_iteration.
#include "runtime/lr_schedules.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

constexpr const char* kParamPath = "scheduler.params.";

void check_finite(const char* key, double value) {
  DS_CHECK_T(ConfigError, std::isfinite(value), kParamPath, key, " must be a finite number, got ",
             value);
}

void check_at_least(const char* key, double value, double min) {
  check_finite(key, value);
  DS_CHECK_T(ConfigError, value >= min, kParamPath, key, " must be >= ", min, ", got ", value);
}

void check_at_least(const char* key, int64_t value, int64_t min) {
  DS_CHECK_T(ConfigError, value >= min, kParamPath, key, " must be >= ", min, ", got ", value);
}

void check_start(int64_t last_batch_iteration) {
  check_at_least("last_batch_iteration", last_batch_iteration, int64_t{-1});
}

void check_groups(const std::vector<double>& base_lrs, const char* type) {
  DS_CHECK_T(ConfigError, !base_lrs.empty(), type,
             " needs an optimizer with at least one parameter group, got none");
}

WarmupType parse_warmup_type(const std::string& value) {
  if (value == kWarmupLogRate) return WarmupType::kLog;
  if (value == kWarmupLinearRate) return WarmupType::kLinear;
  // DeepSpeed falls back to "log" with a warning; a typo here would change the whole warmup.
  DS_CHECK_T(ConfigError, false, kParamPath, "warmup_type must be \"", kWarmupLogRate, "\" or \"",
             kWarmupLinearRate, "\", got \"", value, "\"");
  return WarmupType::kLog;
}

// DeepSpeed raises warmup_num_steps to 2 so that log(warmup_num_steps) is never 0.
int64_t effective_warmup_steps(int64_t warmup_num_steps) {
  check_at_least("warmup_num_steps", warmup_num_steps, int64_t{0});
  return warmup_num_steps < 2 ? 2 : warmup_num_steps;
}

}  // namespace

double warmup_fraction(WarmupType type, int64_t last_batch_iteration, int64_t warmup_num_steps) {
  const double t = static_cast<double>(last_batch_iteration);
  const double w = static_cast<double>(warmup_num_steps);
  if (type == WarmupType::kLog) return std::log(t + 1.0) / std::log(w);
  return t / w;
}

// ---- LrScheduler ----

LrScheduler::LrScheduler(size_t num_groups) : num_groups_(num_groups) {}

std::optional<std::vector<double>> LrScheduler::compute_momentum(int64_t) const {
  return std::nullopt;
}

void LrScheduler::reset(int64_t last_batch_iteration) {
  DS_CHECK(last_batch_iteration >= -1, type(), ": last_batch_iteration must be >= -1, got ",
           last_batch_iteration);
  last_batch_iteration_ = last_batch_iteration;
  lr_ = compute_lr(last_batch_iteration);
  momentum_ = compute_momentum(last_batch_iteration);
  DS_ASSERT(lr_.size() == num_groups_, type());
}

void LrScheduler::step() { reset(last_batch_iteration_ + 1); }

void LrScheduler::step(int64_t last_batch_iteration) { reset(last_batch_iteration); }

void LrScheduler::load_state_dict(const LrSchedulerState& state) {
  reset(state.last_batch_iteration);
}

// ---- WarmupLR / WarmupDecayLR ----

WarmupLR::WarmupLR(const WarmupLRParams& p, const std::vector<double>& base_lrs)
    : LrScheduler(base_lrs.size()),
      min_lr_(p.warmup_min_lr),
      max_lr_(p.warmup_max_lr),
      warmup_num_steps_(effective_warmup_steps(p.warmup_num_steps)),
      warmup_type_(parse_warmup_type(p.warmup_type)) {
  check_groups(base_lrs, kWarmupLR);
  check_at_least("warmup_min_lr", min_lr_, 0.0);
  check_at_least("warmup_max_lr", max_lr_, 0.0);
  check_start(p.last_batch_iteration);
  reset(p.last_batch_iteration);
}

WarmupLR::WarmupLR(const WarmupDecayLRParams& p, const std::vector<double>& base_lrs)
    : LrScheduler(base_lrs.size()),
      min_lr_(p.warmup_min_lr),
      max_lr_(p.warmup_max_lr),
      warmup_num_steps_(effective_warmup_steps(p.warmup_num_steps)),
      warmup_type_(parse_warmup_type(p.warmup_type)) {
  check_groups(base_lrs, kWarmupDecayLR);
  check_at_least("warmup_min_lr", min_lr_, 0.0);
  check_at_least("warmup_max_lr", max_lr_, 0.0);
  // No reset() here: the derived constructor finishes its own members first.
}

std::vector<double> WarmupLR::compute_lr(int64_t t) const {
  // Before the first step: the minimum, which DeepSpeed (>= 0.15.3) writes into the optimizer when it builds the
  // scheduler, so step 1 runs at warmup_min_lr.
  if (t < 0) return std::vector<double>(num_groups(), min_lr_);
  const double gamma = t < warmup_num_steps_ ? warmup_fraction(warmup_type_, t, warmup_num_steps_)
                                             : post_warmup_gamma(t);
  return std::vector<double>(num_groups(), min_lr_ + (max_lr_ - min_lr_) * gamma);
}

WarmupDecayLR::WarmupDecayLR(const WarmupDecayLRParams& p, const std::vector<double>& base_lrs)
    : WarmupLR(p, base_lrs), total_num_steps_(p.total_num_steps) {
  check_at_least("total_num_steps", total_num_steps_, int64_t{1});
  // DeepSpeed only warns; the decay would then start at 0 the moment warmup ends.
  DS_CHECK_T(ConfigError, total_num_steps_ >= warmup_num_steps_, kParamPath, "total_num_steps (",
             total_num_steps_, ") must be >= warmup_num_steps (", warmup_num_steps_,
             ", values below 2 count as 2)");
  check_start(p.last_batch_iteration);
  reset(p.last_batch_iteration);
}

double WarmupDecayLR::post_warmup_gamma(int64_t t) const {
  const double remaining = static_cast<double>(total_num_steps_ - t);
  const double span = std::max(1.0, static_cast<double>(total_num_steps_ - warmup_num_steps_));
  return std::max(0.0, remaining / span);
}

// ---- WarmupCosineLR ----

WarmupCosineLR::WarmupCosineLR(const WarmupCosineLRParams& p, const std::vector<double>& base_lrs)
    : LrScheduler(base_lrs.size()),
      base_lrs_(base_lrs),
      total_num_steps_(p.total_num_steps),
      warmup_min_ratio_(p.warmup_min_ratio),
      warmup_num_steps_(effective_warmup_steps(p.warmup_num_steps)),
      cos_min_ratio_(p.cos_min_ratio),
      warmup_type_(parse_warmup_type(p.warmup_type)) {
  check_groups(base_lrs, kWarmupCosineLR);
  for (double lr : base_lrs_) {
    DS_CHECK_T(ConfigError, std::isfinite(lr) && lr >= 0.0, kWarmupCosineLR,
               ": optimizer lr must be a finite number >= 0, got ", lr);
  }
  check_at_least("total_num_steps", total_num_steps_, int64_t{1});
  // The cosine spans total - warmup steps; DeepSpeed divides by zero at equality.
  DS_CHECK_T(ConfigError, total_num_steps_ > warmup_num_steps_, kParamPath, "total_num_steps (",
             total_num_steps_, ") must be > warmup_num_steps (", warmup_num_steps_,
             ", values below 2 count as 2)");
  check_at_least("warmup_min_ratio", warmup_min_ratio_, 0.0);
  check_at_least("cos_min_ratio", cos_min_ratio_, 0.0);
  check_start(p.last_batch_iteration);
  reset(p.last_batch_iteration);
}

double WarmupCosineLR::lr_ratio(int64_t t) const {
  if (t < 0) return 0.0;
  if (t < warmup_num_steps_) {
    return warmup_min_ratio_ +
           (1.0 - warmup_min_ratio_) * warmup_fraction(warmup_type_, t, warmup_num_steps_);
  }
  const int64_t span = total_num_steps_ - warmup_num_steps_;
  // Steps into the cosine, capped at its end so the lr stays at cos_min_ratio afterwards.
  const int64_t done = std::min(t - warmup_num_steps_ + 1, span);
  const double kPi = std::acos(-1.0);
  const double cosine = (1.0 + std::cos(kPi * static_cast<double>(done) / span)) / 2.0;
  return std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * cosine);
}

std::vector<double> WarmupCosineLR::compute_lr(int64_t t) const {
  const double ratio = lr_ratio(t);
  std::vector<double> lrs;
  lrs.reserve(base_lrs_.size());
  for (double base : base_lrs_) lrs.push_back(base * ratio);
  return lrs;
}

// ---- OneCycle ----

OneCycle::OneCycle(const OneCycleParams& p, const std::vector<double>& base_lrs)
    : LrScheduler(base_lrs.size()),
      decay_lr_rate_(p.decay_lr_rate),
      first_step_size_(p.cycle_first_step_size),
      second_step_size_(p.cycle_second_step_size.value_or(p.cycle_first_step_size)),
      first_stair_count_(p.cycle_first_stair_count),
      second_stair_count_(p.cycle_second_stair_count.value_or(p.cycle_first_stair_count)),
      decay_step_size_(p.decay_step_size),
      cycle_momentum_(p.cycle_momentum),
      min_mom_(p.cycle_min_mom),
      max_mom_(p.cycle_max_mom),
      decay_mom_rate_(p.decay_mom_rate) {
  check_groups(base_lrs, kOneCycle);
  DS_CHECK_T(ConfigError, p.cycle_min_lr.has_value(), kParamPath,
             "cycle_min_lr is required for OneCycle");
  DS_CHECK_T(ConfigError, p.cycle_max_lr.has_value(), kParamPath,
             "cycle_max_lr is required for OneCycle");
  min_lr_ = *p.cycle_min_lr;
  max_lr_ = *p.cycle_max_lr;
  check_at_least("cycle_min_lr", min_lr_, 0.0);
  check_finite("cycle_max_lr", max_lr_);
  DS_CHECK_T(ConfigError, max_lr_ >= min_lr_, kParamPath, "cycle_max_lr (", max_lr_,
             ") must be >= cycle_min_lr (", min_lr_, ")");
  // A negative rate could make the decay's divisor 1 + rate * n reach zero.
  check_at_least("decay_lr_rate", decay_lr_rate_, 0.0);
  check_at_least("cycle_first_step_size", first_step_size_, int64_t{1});
  check_at_least("cycle_second_step_size", second_step_size_, int64_t{1});
  check_at_least("cycle_first_stair_count", first_stair_count_, int64_t{0});
  check_at_least("cycle_second_stair_count", second_stair_count_, int64_t{0});
  check_at_least("decay_step_size", decay_step_size_, int64_t{0});
  if (cycle_momentum_) {
    check_finite("cycle_min_mom", min_mom_);
    check_finite("cycle_max_mom", max_mom_);
    DS_CHECK_T(ConfigError, max_mom_ >= min_mom_, kParamPath, "cycle_max_mom (", max_mom_,
               ") must be >= cycle_min_mom (", min_mom_, ")");
    check_finite("decay_mom_rate", decay_mom_rate_);
  }
  check_start(p.last_batch_iteration);
  reset(p.last_batch_iteration);
}

double OneCycle::scale_factor(int64_t t) const {
  // DeepSpeed takes the fractional position of step t + 1 in the cycle; integers keep the stair
  // boundaries exact.
  const int64_t total = first_step_size_ + second_step_size_;
  const int64_t pos = (t + 1) % total;
  if (pos <= first_step_size_) {
    if (first_stair_count_ == 0) return static_cast<double>(pos) / first_step_size_;
    const int64_t stair = pos * first_stair_count_ / first_step_size_;
    return static_cast<double>(stair) / first_stair_count_;
  }
  const int64_t down = pos - first_step_size_;  // steps into the decreasing half, 1..second-1
  if (second_stair_count_ == 0) {
    return static_cast<double>(second_step_size_ - down) / second_step_size_;
  }
  const int64_t stair = down * second_stair_count_ / second_step_size_;
  return 1.0 - static_cast<double>(stair) / second_stair_count_;
}

int64_t OneCycle::decay_steps(int64_t t) const {
  const int64_t total = first_step_size_ + second_step_size_;
  return t < total ? -1 : t - total + 1;
}

std::vector<double> OneCycle::compute_lr(int64_t t) const {
  const int64_t n = decay_steps(t);
  double lr;
  if (n < 0) {
    lr = min_lr_ + (max_lr_ - min_lr_) * scale_factor(t);
  } else if (decay_step_size_ == 0 || decay_lr_rate_ == 0.0) {
    lr = min_lr_;
  } else {
    lr = min_lr_ / (1.0 + decay_lr_rate_ * static_cast<double>(n) / decay_step_size_);
  }
  return std::vector<double>(num_groups(), lr);
}

std::optional<std::vector<double>> OneCycle::compute_momentum(int64_t t) const {
  if (!cycle_momentum_) return std::nullopt;
  const int64_t n = decay_steps(t);
  double mom;
  if (t < 0) {
    mom = min_mom_;
  } else if (n < 0) {
    mom = max_mom_ - (max_mom_ - min_mom_) * scale_factor(t);
  } else if (decay_step_size_ == 0 || decay_mom_rate_ == 0.0) {
    mom = max_mom_;
  } else {
    mom = max_mom_ * (1.0 + decay_mom_rate_ * static_cast<double>(n) / decay_step_size_);
  }
  return std::vector<double>(num_groups(), mom);
}

// ---- LRRangeTest ----

LRRangeTest::LRRangeTest(const LRRangeTestParams& p, const std::vector<double>& base_lrs)
    : LrScheduler(base_lrs.size()),
      min_lr_(p.lr_range_test_min_lr),
      step_size_(p.lr_range_test_step_size),
      step_rate_(p.lr_range_test_step_rate),
      staircase_(p.lr_range_test_staircase) {
  check_groups(base_lrs, kLRRangeTest);
  check_at_least("lr_range_test_min_lr", min_lr_, 0.0);
  check_at_least("lr_range_test_step_size", step_size_, int64_t{1});
  check_at_least("lr_range_test_step_rate", step_rate_, 0.0);
  check_start(p.last_batch_iteration);
  reset(p.last_batch_iteration);
}

std::vector<double> LRRangeTest::compute_lr(int64_t t) const {
  const int64_t done = t + 1;
  const double interval =
      staircase_ ? static_cast<double>(done / step_size_) : static_cast<double>(done) / step_size_;
  return std::vector<double>(num_groups(), min_lr_ * (1.0 + step_rate_ * interval));
}

// ---- factories ----

std::unique_ptr<LrScheduler> make_warmup_lr(const WarmupLRParams& params,
                                            const std::vector<double>& base_lrs) {
  return std::make_unique<WarmupLR>(params, base_lrs);
}

std::unique_ptr<LrScheduler> make_warmup_decay_lr(const WarmupDecayLRParams& params,
                                                  const std::vector<double>& base_lrs) {
  return std::make_unique<WarmupDecayLR>(params, base_lrs);
}

std::unique_ptr<LrScheduler> make_warmup_cosine_lr(const WarmupCosineLRParams& params,
                                                   const std::vector<double>& base_lrs) {
  return std::make_unique<WarmupCosineLR>(params, base_lrs);
}

std::unique_ptr<LrScheduler> make_one_cycle(const OneCycleParams& params,
                                            const std::vector<double>& base_lrs) {
  return std::make_unique<OneCycle>(params, base_lrs);
}

std::unique_ptr<LrScheduler> make_lr_range_test(const LRRangeTestParams& params,
                                                const std::vector<double>& base_lrs) {
  return std::make_unique<LRRangeTest>(params, base_lrs);
}

}  // namespace deepspeed::runtime
