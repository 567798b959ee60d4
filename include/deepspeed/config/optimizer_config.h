// The `optimizer` and `scheduler` sections.
//
// Types are matched case-insensitively and stored in DeepSpeed's canonical spelling (DeepSpeed's
// own optimizers lower-case, e.g. "adamw"; torch ones as torch spells them, e.g. "SGD"; schedulers
// as "WarmupLR"). Each type's parameter names are checked (an unknown one is an error with a
// suggestion) and DeepSpeed's defaults are filled into `params` where DeepSpeed has one.
#pragma once

#include <string>
#include <vector>

#include "deepspeed/config/params.h"

namespace deepspeed::config {

struct OptimizerConfig {
  std::string type;  // canonical name, e.g. "adamw"
  Params params{"optimizer.params"};
  bool legacy_fusion = false;
};

struct SchedulerConfig {
  std::string type;  // canonical name, e.g. "WarmupDecayLR"
  Params params{"scheduler.params"};
};

// The optimizer / scheduler types this build knows, in canonical spelling.
std::vector<std::string> known_optimizer_types();
std::vector<std::string> known_scheduler_types();

}  // namespace deepspeed::config
