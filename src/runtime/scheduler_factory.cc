#include "runtime/scheduler_factory.h"

#include <string>

#include "deepspeed/error.h"

namespace deepspeed::runtime {
namespace {

using config::Params;

void read_warmup(const Params& p, double* min_lr, double* max_lr, int64_t* steps, std::string* type,
                 int64_t* last) {
  *min_lr = p.get_number("warmup_min_lr", *min_lr);
  *max_lr = p.get_number("warmup_max_lr", *max_lr);
  *steps = p.get_int("warmup_num_steps", *steps);
  *type = p.get_string("warmup_type", *type);
  *last = p.get_int("last_batch_iteration", *last);
}

}  // namespace

std::unique_ptr<LrScheduler> make_scheduler_from_config(const config::SchedulerConfig& cfg,
                                                        const std::vector<double>& base_lrs) {
  const Params& p = cfg.params;
  if (cfg.type == kWarmupLR) {
    WarmupLRParams s;
    read_warmup(p, &s.warmup_min_lr, &s.warmup_max_lr, &s.warmup_num_steps, &s.warmup_type,
                &s.last_batch_iteration);
    return make_warmup_lr(s, base_lrs);
  }
  if (cfg.type == kWarmupDecayLR) {
    WarmupDecayLRParams s;
    DS_CHECK_T(ConfigError, p.has("total_num_steps"), "scheduler.params.total_num_steps: required by WarmupDecayLR");
    s.total_num_steps = p.get_int("total_num_steps", 0);
    read_warmup(p, &s.warmup_min_lr, &s.warmup_max_lr, &s.warmup_num_steps, &s.warmup_type,
                &s.last_batch_iteration);
    return make_warmup_decay_lr(s, base_lrs);
  }
  if (cfg.type == kWarmupCosineLR) {
    WarmupCosineLRParams s;
    DS_CHECK_T(ConfigError, p.has("total_num_steps"),
               "scheduler.params.total_num_steps: required by WarmupCosineLR");
    s.total_num_steps = p.get_int("total_num_steps", 0);
    s.warmup_min_ratio = p.get_number("warmup_min_ratio", s.warmup_min_ratio);
    s.warmup_num_steps = p.get_int("warmup_num_steps", s.warmup_num_steps);
    s.cos_min_ratio = p.get_number("cos_min_ratio", s.cos_min_ratio);
    s.warmup_type = p.get_string("warmup_type", s.warmup_type);
    s.last_batch_iteration = p.get_int("last_batch_iteration", s.last_batch_iteration);
    return make_warmup_cosine_lr(s, base_lrs);
  }
  if (cfg.type == kOneCycle) {
    OneCycleParams s;
    if (p.has("cycle_min_lr")) s.cycle_min_lr = p.get_number("cycle_min_lr", 0.0);
    if (p.has("cycle_max_lr")) s.cycle_max_lr = p.get_number("cycle_max_lr", 0.0);
    s.decay_lr_rate = p.get_number("decay_lr_rate", s.decay_lr_rate);
    s.cycle_first_step_size = p.get_int("cycle_first_step_size", s.cycle_first_step_size);
    if (p.has("cycle_second_step_size") && !p.values().at("cycle_second_step_size").is_null())
      s.cycle_second_step_size = p.get_int("cycle_second_step_size", 0);
    s.cycle_first_stair_count = p.get_int("cycle_first_stair_count", s.cycle_first_stair_count);
    if (p.has("cycle_second_stair_count") && !p.values().at("cycle_second_stair_count").is_null())
      s.cycle_second_stair_count = p.get_int("cycle_second_stair_count", 0);
    s.decay_step_size = p.get_int("decay_step_size", s.decay_step_size);
    s.cycle_momentum = p.get_bool("cycle_momentum", s.cycle_momentum);
    s.cycle_min_mom = p.get_number("cycle_min_mom", s.cycle_min_mom);
    s.cycle_max_mom = p.get_number("cycle_max_mom", s.cycle_max_mom);
    s.decay_mom_rate = p.get_number("decay_mom_rate", s.decay_mom_rate);
    s.last_batch_iteration = p.get_int("last_batch_iteration", s.last_batch_iteration);
    return make_one_cycle(s, base_lrs);
  }
  if (cfg.type == kLRRangeTest) {
    LRRangeTestParams s;
    s.lr_range_test_min_lr = p.get_number("lr_range_test_min_lr", s.lr_range_test_min_lr);
    s.lr_range_test_step_size = p.get_int("lr_range_test_step_size", s.lr_range_test_step_size);
    s.lr_range_test_step_rate = p.get_number("lr_range_test_step_rate", s.lr_range_test_step_rate);
    s.lr_range_test_staircase = p.get_bool("lr_range_test_staircase", s.lr_range_test_staircase);
    s.last_batch_iteration = p.get_int("last_batch_iteration", s.last_batch_iteration);
    return make_lr_range_test(s, base_lrs);
  }
  throw ConfigError("scheduler.type: '" + cfg.type + "' is not implemented in deepspeed-cpp");
}

}  // namespace deepspeed::runtime
