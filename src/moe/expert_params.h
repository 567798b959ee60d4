// How the engine finds a model's MoE experts: their parameters grouped by the ranks that hold
// copies of them (their expert-data-parallel group), so gradients are reduced and ZeRO partitions
// split over those ranks only.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::moe {

struct ExpertParams {
  comm::ProcessGroup group;        // expert-data-parallel group
  std::vector<at::Tensor> params;  // in module order
};

// Expert parameters under their global names: a local expert i of an Experts module at `prefix`
// with first global id f is "<prefix>.deepspeed_experts.<f + i>.<rest>", the name it has when every
// expert is local (ep_size 1). Checkpoints name experts so, which makes them loadable at any
// ep_size and world size.
struct ExpertNames {
  std::unordered_map<const void*, std::string>
      global;                    // this rank's expert parameters -> global name
  std::vector<std::string> all;  // every expert parameter's global name, all ranks'
};
ExpertNames expert_names(torch::nn::Module& model);

// One expert held by this rank, for its checkpoint file: the MoE layer's index among the model's
// MoE layers, the global expert id, and its parameters by global name.
struct LocalExpert {
  int64_t layer = 0;
  int64_t expert = 0;
  bool writer =
      false;  // this rank is the first of the ranks holding the expert: it writes the file
  std::vector<std::pair<std::string, at::Tensor>> params;
};
std::vector<LocalExpert> local_experts(torch::nn::Module& model);

// One entry per ep_size in use with ep_size > 1 (at ep_size 1 experts are replicated on every rank
// like any other parameter), in increasing ep_size, so every rank lists the same groups in the same
// order.
std::vector<ExpertParams> find_expert_params(torch::nn::Module& model);

}  // namespace deepspeed::moe
