// Muon in the engine (optimizer.type "Muon", DeepSpeed's MuonWithAuxAdam): groups marked use_muon
// (runtime/param_groups.h split_muon_groups) take Nesterov momentum orthogonalized by Newton-Schulz
// (deepspeed/ops/muon.h), the other groups an AdamW. Newton-Schulz needs each matrix whole, while ZeRO's masters hold
// flat ranges that cut matrices: each rank computes the momentum and the Nesterov update on the pieces it holds
// (elementwise), one all-reduce over the data-parallel group per bounded batch of matrices puts the updates back
// together on every rank, and each rank orthogonalizes the matrices it holds a piece of and applies its pieces.
//
// Gradients arrive averaged, unscaled and clipped (the engine's gradient_clipping bounds the raw gradient, as
// DeepSpeed does at stage 0; its ZeRO 1/2 path clips the orthogonalized update instead).
#pragma once

#include <memory>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "runtime/optimizer.h"
#include "zero/flat_params.h"
#include "zero/partition.h"

namespace deepspeed::runtime {

// `shapes[g][i]`: parameter i of group g when whole, the same on every rank (zero::Stage::param_shapes). `fragments`
// and `partitioned` as for make_lamb_optimizer. Throws ConfigError for options this Muon does not have
// (per_head_muon, max_grad_norm).
std::unique_ptr<EngineOptimizer> make_muon_optimizer(const config::OptimizerConfig& cfg,
                                                     const std::vector<zero::FlatGroup>& groups,
                                                     const std::vector<at::Tensor>& masters,
                                                     std::vector<std::vector<std::vector<int64_t>>> shapes,
                                                     std::vector<zero::MasterFragment> fragments, bool partitioned,
                                                     comm::ProcessGroup group);

}  // namespace deepspeed::runtime
