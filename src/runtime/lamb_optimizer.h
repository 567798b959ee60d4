// LAMB in the engine (optimizer.type "Lamb", DeepSpeed's FusedLamb arithmetic: deepspeed/ops/cpu_optimizer.h). Its
// trust ratio ||p|| / ||u|| is per parameter tensor, while ZeRO's masters hold flat ranges that cut tensors: each
// rank sums the squares over the fragments it holds (zero::MasterFragment), one all-reduce over the data-parallel
// group adds them up per tensor, and every fragment then takes its whole tensor's ratio.
#pragma once

#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "runtime/optimizer.h"
#include "zero/flat_params.h"
#include "zero/partition.h"

namespace deepspeed::runtime {

// `fragments` place every parameter (or this rank's pieces of it) in `masters`; `partitioned`: the masters hold
// only this rank's partition (ZeRO 1-3), so the squares are summed over `group` (at stage 0 each rank holds whole
// tensors). Throws ConfigError for options FusedLamb does not have (amsgrad, max_grad_norm: use gradient_clipping).
std::unique_ptr<EngineOptimizer> make_lamb_optimizer(const config::OptimizerConfig& cfg,
                                                     const std::vector<zero::FlatGroup>& groups,
                                                     const std::vector<at::Tensor>& masters,
                                                     std::vector<zero::MasterFragment> fragments, bool partitioned,
                                                     comm::ProcessGroup group);

}  // namespace deepspeed::runtime
