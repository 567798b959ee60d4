// The concrete schedules behind the factories in deepspeed/lr_schedules.h, one class per DeepSpeed
// scheduler. Constructors validate their params (ConfigError naming `scheduler.params.<key>`) and
// compute the values for the starting iteration; the classes hold only validated constants, so
// compute_lr / compute_momentum are pure functions of the iteration.
//
// Thread-safety: as LrScheduler, none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/lr_schedules.h"

namespace deepspeed::runtime {

// The warmup curve shared by WarmupLR, WarmupDecayLR and WarmupCosineLR.
enum class WarmupType { kLog, kLinear };

// The fraction (0..1) of the warmup done after `last_batch_iteration` steps, for
// 0 <= last_batch_iteration < warmup_num_steps.
double warmup_fraction(WarmupType type, int64_t last_batch_iteration, int64_t warmup_num_steps);

class WarmupLR : public LrScheduler {
 public:
  WarmupLR(const WarmupLRParams& params, const std::vector<double>& base_lrs);
  const char* type() const override { return kWarmupLR; }

 protected:
  // For WarmupDecayLR, which shares the warmup and replaces what follows it.
  WarmupLR(const WarmupDecayLRParams& params, const std::vector<double>& base_lrs);

  std::vector<double> compute_lr(int64_t last_batch_iteration) const override;
  // The multiplier of (max - min) once warmup is over.
  virtual double post_warmup_gamma(int64_t last_batch_iteration) const { return 1.0; }

  double min_lr_;
  double max_lr_;
  int64_t warmup_num_steps_;  // effective: at least 2
  WarmupType warmup_type_;
};

class WarmupDecayLR final : public WarmupLR {
 public:
  WarmupDecayLR(const WarmupDecayLRParams& params, const std::vector<double>& base_lrs);
  const char* type() const override { return kWarmupDecayLR; }

 protected:
  double post_warmup_gamma(int64_t last_batch_iteration) const override;

 private:
  int64_t total_num_steps_;
};

class WarmupCosineLR final : public LrScheduler {
 public:
  WarmupCosineLR(const WarmupCosineLRParams& params, const std::vector<double>& base_lrs);
  const char* type() const override { return kWarmupCosineLR; }

 protected:
  std::vector<double> compute_lr(int64_t last_batch_iteration) const override;

 private:
  double lr_ratio(int64_t last_batch_iteration) const;

  std::vector<double> base_lrs_;
  int64_t total_num_steps_;
  double warmup_min_ratio_;
  int64_t warmup_num_steps_;  // effective: at least 2
  double cos_min_ratio_;
  WarmupType warmup_type_;
};

class OneCycle final : public LrScheduler {
 public:
  OneCycle(const OneCycleParams& params, const std::vector<double>& base_lrs);
  const char* type() const override { return kOneCycle; }

 protected:
  std::vector<double> compute_lr(int64_t last_batch_iteration) const override;
  // Before the first step this is cycle_min_mom, which DeepSpeed writes into the optimizer at
  // construction (its cycle formula would give cycle_max_mom there).
  std::optional<std::vector<double>> compute_momentum(int64_t last_batch_iteration) const override;

 private:
  // Where in the cycle step `last_batch_iteration` lands: 0 at the bottom, 1 at the peak.
  double scale_factor(int64_t last_batch_iteration) const;
  // The number of post-cycle decay steps taken, or -1 while still in the cycle.
  int64_t decay_steps(int64_t last_batch_iteration) const;

  double min_lr_;
  double max_lr_;
  double decay_lr_rate_;
  int64_t first_step_size_;
  int64_t second_step_size_;
  int64_t first_stair_count_;
  int64_t second_stair_count_;
  int64_t decay_step_size_;
  bool cycle_momentum_;
  double min_mom_;
  double max_mom_;
  double decay_mom_rate_;
};

class LRRangeTest final : public LrScheduler {
 public:
  LRRangeTest(const LRRangeTestParams& params, const std::vector<double>& base_lrs);
  const char* type() const override { return kLRRangeTest; }

 protected:
  std::vector<double> compute_lr(int64_t last_batch_iteration) const override;

 private:
  double min_lr_;
  int64_t step_size_;
  double step_rate_;
  bool staircase_;
};

}  // namespace deepspeed::runtime
