// The engine's parameter groups, before any ZeRO stage sees them: the caller's groups (InitializeOptions::
// param_groups) or one group of every trainable parameter, with MoE experts of ep_size > 1 moved into groups of
// their own (reduced over their expert-data-parallel ranks, moe/expert_params.h).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "deepspeed/deepspeed.h"
#include "zero/flat_params.h"

namespace deepspeed::runtime {

// The caller's groups, or one group of the module's trainable parameters (tied weights once). Throws when the
// model has no parameter that requires a gradient.
std::vector<zero::FlatGroup> make_param_groups(torch::nn::Module& module, std::vector<ParamGroup> given);

// Moves MoE expert parameters (of ep_size > 1) out of `groups` into groups of their own, one per group and expert
// entry; groups left empty are dropped.
void split_expert_groups(torch::nn::Module& module, std::vector<zero::FlatGroup>& groups);

// optimizer.type Muon: splits each group into the matrices Newton-Schulz updates and the rest (its auxiliary Adam),
// as DeepSpeed's engine does: a parameter is Muon's when it has 2 or more dimensions and its name holds neither
// "embed" nor "lm_head" (any case), and, beyond DeepSpeed's rule, when it is not an Embedding module's weight (a
// lookup table is not a linear map: a model that names its embedding `wte` keeps it on Adam). Each half keeps its
// group's lr / weight_decay overrides; a half with no parameters is dropped.
void split_muon_groups(const std::shared_ptr<torch::nn::Module>& module, std::vector<zero::FlatGroup>& groups);

}  // namespace deepspeed::runtime
