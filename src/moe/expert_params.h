// How the engine finds a model's MoE experts: their parameters grouped by the ranks that hold
// copies of them (their expert-data-parallel group), so gradients are reduced and ZeRO partitions
// split over those ranks only.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::moe {

struct ExpertParams {
  std::string name;                // DeepSpeed's group name, "ep_size_<n>"
  comm::ProcessGroup group;        // expert-data-parallel group
  std::vector<at::Tensor> params;  // in module order
};

// One entry per ep_size in use with ep_size > 1 (at ep_size 1 experts are replicated on every rank
// like any other parameter), in increasing ep_size, so every rank lists the same groups in the same
// order.
std::vector<ExpertParams> find_expert_params(torch::nn::Module& model);

}  // namespace deepspeed::moe
