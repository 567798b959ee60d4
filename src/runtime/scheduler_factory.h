// Builds the LR scheduler a config's `scheduler` section names, mapping its params onto the schedule structs.
#pragma once

#include <memory>
#include <vector>

#include "deepspeed/config.h"
#include "deepspeed/lr_schedules.h"

namespace deepspeed::runtime {

// `base_lrs`: the optimizer's lr of each parameter group. Throws ConfigError on a bad or unknown parameter.
std::unique_ptr<LrScheduler> make_scheduler_from_config(const config::SchedulerConfig& cfg,
                                                        const std::vector<double>& base_lrs);

}  // namespace deepspeed::runtime
