// DeepSpeed's learning-rate schedules: WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle and
// LRRangeTest (deepspeed/runtime/lr_schedules.py), as plain-double state machines.
//
// A scheduler does not own an optimizer. It computes, for each optimizer parameter group, the lr
// (and for OneCycle with cycle_momentum the momentum, i.e. Adam's beta1) that the engine writes
// into the optimizer. The engine calls step() once per optimizer step, after the optimizer has
// stepped, exactly as DeepSpeed's engine does; `last_batch_iteration` counts those calls, starting
// at -1 ("not started"). The values DeepSpeed writes into the optimizer when it constructs a
// scheduler are get_lr() / get_momentum() right after construction.
//
// Params structs use DeepSpeed's key names and constructor defaults; the engine maps the
// `scheduler.params` block of ds_config.json onto them. Invalid params throw ConfigError naming the
// key as `scheduler.params.<name>`. Where DeepSpeed merely warns (an unknown warmup_type,
// total_num_steps below warmup_num_steps) we reject, because nothing is silently ignored here.
//
// Deliberate differences from DeepSpeed, each documented at its field:
//   - WarmupCosineLR holds cos_min_ratio after total_num_steps (DeepSpeed's cosine rises again).
//   - OneCycle's cycle_*_stair_count make the cycle a staircase as DeepSpeed documents (DeepSpeed
//     accepts them but never uses them; with the default 0 both agree exactly).
//
// Thread-safety: none. A scheduler belongs to one engine and is used from its training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::runtime {

// DeepSpeed's scheduler type names, as `scheduler.type` spells them.
inline constexpr const char* kWarmupLR = "WarmupLR";
inline constexpr const char* kWarmupDecayLR = "WarmupDecayLR";
inline constexpr const char* kWarmupCosineLR = "WarmupCosineLR";
inline constexpr const char* kOneCycle = "OneCycle";
inline constexpr const char* kLRRangeTest = "LRRangeTest";

// warmup_type values.
inline constexpr const char* kWarmupLogRate = "log";
inline constexpr const char* kWarmupLinearRate = "linear";

// OneCycle with cycle_momentum sets each group's Adam betas to (momentum, 0.99) in DeepSpeed: it
// overwrites beta2 as well. The engine mirrors that with this constant.
inline constexpr double kOneCycleBeta2 = 0.99;

// Increases the lr from warmup_min_lr to warmup_max_lr over warmup_num_steps, then holds it.
// During warmup the fraction of the way up after step t (t = last_batch_iteration) is
// log(t + 1) / log(warmup_num_steps) for "log", t / warmup_num_steps for "linear". Before the
// first step the lr is 0, as DeepSpeed's get_lr() reports (the same for the two below).
struct WarmupLRParams {
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;  // values below 2 act as 2, as in DeepSpeed
  std::string warmup_type = kWarmupLogRate;
  int64_t last_batch_iteration = -1;  // resume point; -1 starts from the beginning
};

// WarmupLR, then a linear decay that reaches 0 at total_num_steps and stays there:
// lr = min + (max - min) * max(0, (total - t) / max(1, total - warmup)).
struct WarmupDecayLRParams {
  int64_t total_num_steps = 0;  // required, >= the effective warmup_num_steps
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = kWarmupLogRate;
  int64_t last_batch_iteration = -1;
};

// Ratios of each group's base lr (the optimizer's configured lr): warmup from warmup_min_ratio to 1
// over warmup_num_steps, then a half cosine down to cos_min_ratio, reached after total_num_steps
// steps and held from then on (DeepSpeed's formula would climb back up past total_num_steps).
struct WarmupCosineLRParams {
  int64_t total_num_steps = 0;  // required, > the effective warmup_num_steps
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;
  double cos_min_ratio = 0.0001;
  std::string warmup_type = kWarmupLogRate;
  int64_t last_batch_iteration = -1;
};

// One triangular cycle of the lr from cycle_min_lr up to cycle_max_lr (cycle_first_step_size
// steps) and back down (cycle_second_step_size steps), with momentum moving the opposite way
// between cycle_max_mom and cycle_min_mom; then a post-cycle decay:
// lr = cycle_min_lr / (1 + decay_lr_rate * n / decay_step_size) and
// momentum = cycle_max_mom * (1 + decay_mom_rate * n / decay_step_size) after n decay steps
// (no decay when decay_step_size or the rate is 0).
struct OneCycleParams {
  std::optional<double> cycle_min_lr;  // required
  std::optional<double> cycle_max_lr;  // required, >= cycle_min_lr
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // unset: cycle_first_step_size
  // Number of equal stairs in each half of the cycle; 0 is a continuous ramp. A half with n stairs
  // holds each level for 1/n of the half and reaches the far end on the half's last step.
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // unset: cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
  int64_t last_batch_iteration = -1;
};

// The lr range test: lr = lr_range_test_min_lr * (1 + step_rate * k), with
// k = (t + 1) / step_size, floored when lr_range_test_staircase.
struct LRRangeTestParams {
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  int64_t last_batch_iteration = -1;
};

// What a checkpoint stores for a scheduler; DeepSpeed's state_dict() is the same single entry.
struct LrSchedulerState {
  int64_t last_batch_iteration = -1;
};

// A learning-rate schedule over a fixed number of optimizer parameter groups.
class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  LrScheduler(const LrScheduler&) = delete;
  LrScheduler& operator=(const LrScheduler&) = delete;

  // DeepSpeed's type name, e.g. "WarmupLR".
  virtual const char* type() const = 0;

  // Advances last_batch_iteration by one and recomputes lr and momentum. Call once per optimizer
  // step, after the optimizer has stepped.
  void step();
  // Jumps to the given iteration (>= -1) and recomputes, as DeepSpeed's step(last_batch_iteration).
  void step(int64_t last_batch_iteration);

  // Per-group lr for the current last_batch_iteration. Before the first step this is what the
  // engine writes into the optimizer at construction.
  const std::vector<double>& get_lr() const { return lr_; }
  // The same values: the lr last computed by construction, step() or load_state_dict().
  const std::vector<double>& get_last_lr() const { return lr_; }
  // Per-group momentum (beta1) to write into the optimizer; set only for OneCycle with
  // cycle_momentum.
  const std::optional<std::vector<double>>& get_momentum() const { return momentum_; }

  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  size_t num_groups() const { return num_groups_; }

  LrSchedulerState state_dict() const { return LrSchedulerState{last_batch_iteration_}; }
  // Restores the iteration and recomputes lr and momentum for it, so the engine can write them
  // into the optimizer right away.
  void load_state_dict(const LrSchedulerState& state);

 protected:
  explicit LrScheduler(size_t num_groups);

  // The per-group lr after `last_batch_iteration` steps (-1: before the first step).
  virtual std::vector<double> compute_lr(int64_t last_batch_iteration) const = 0;
  // The per-group momentum, or nullopt when this schedule does not drive momentum.
  virtual std::optional<std::vector<double>> compute_momentum(int64_t last_batch_iteration) const;

  // Sets the iteration and recomputes; the most-derived constructor calls it last.
  void reset(int64_t last_batch_iteration);

 private:
  size_t num_groups_;
  int64_t last_batch_iteration_ = -1;
  std::vector<double> lr_;
  std::optional<std::vector<double>> momentum_;
};

// Factories. `base_lrs` holds the optimizer's configured lr of each parameter group: its size is
// the group count; WarmupCosineLR also scales by the values. All throw ConfigError on bad params.
std::unique_ptr<LrScheduler> make_warmup_lr(const WarmupLRParams& params,
                                            const std::vector<double>& base_lrs);
std::unique_ptr<LrScheduler> make_warmup_decay_lr(const WarmupDecayLRParams& params,
                                                  const std::vector<double>& base_lrs);
std::unique_ptr<LrScheduler> make_warmup_cosine_lr(const WarmupCosineLRParams& params,
                                                   const std::vector<double>& base_lrs);
std::unique_ptr<LrScheduler> make_one_cycle(const OneCycleParams& params,
                                            const std::vector<double>& base_lrs);
std::unique_ptr<LrScheduler> make_lr_range_test(const LRRangeTestParams& params,
                                                const std::vector<double>& base_lrs);

}  // namespace deepspeed::runtime
