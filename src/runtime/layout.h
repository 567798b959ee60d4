// The engine's rank layout, decided once when it is built: which ranks it averages gradients over, which hold the
// other parts of one replica, how many split each sequence, whether MoE experts are split over ranks; and every
// refusal that depends on how the layout meets the config.
//
// The order it is made in (make_layout): the config against the world and the model's own parallel layers
// (config::initialize_rules, phases kDegrees and kModel); the caller's groups when it lays out the ranks itself (the
// pipeline engine, InitializeOptions::data_parallel_group / model_parallel_group), else tensor parallelism's
// (tp::apply, which also runs AutoTP); then sequence parallelism's groups (sequence::apply). MoE expert
// groups are the model's layers' (moe::expert_groups) and reported by the parameter groups (add_experts). Every
// group, here and there, comes from the world's rank grid (comm/mesh.h).
#pragma once

#include <torch/nn/module.h>

#include "deepspeed/comm.h"
#include "deepspeed/config.h"
#include "deepspeed/deepspeed.h"

namespace deepspeed::runtime {

struct Layout {
  comm::ProcessGroup data_parallel;   // the engine's world: gradients averaged, ZeRO partitions
  comm::ProcessGroup model_parallel;  // the other parts of one replica (null without): norm and overflow agreed
  bool tensor_parallel = false;       // model_parallel is the tensor-parallel group (tp::apply)
  int sequence_parallel = 1;          // ranks splitting each sequence; data_parallel / this = the batch's ranks
  // Every rank holds a whole replica and all are one data-parallel world: no tensor or pipeline parallelism and no
  // data-parallel group of the caller's. Some features need it.
  bool whole_world = true;
  bool experts = false;               // some parameter groups are MoE experts reduced over their own ranks
  // Ranks the global batch is counted over.
  int batch_ranks() const { return data_parallel.size() / sequence_parallel; }
};

// The refusals about the degrees themselves, checked together before any transform runs: tensor and sequence
// parallelism's sizes divide the world; AutoTP below stage 3 and not beside a caller's layout; Ulysses alone (no
// tensor or pipeline parallelism yet); hpZ's secondary groups over the whole world, within a host. ConfigError names
// the key. (MoE's, which the model's layers know: add_experts.)
void check_degrees(const Config& config, const InitializeOptions& options);

// Applies the parallelism transforms to `module` and makes the layout (above), check_degrees first; `options` loses the groups and
// exclusions it handed over. Throws ConfigError naming the key for a layout the config cannot train with.
Layout make_layout(torch::nn::Module& module, const Config& config, InitializeOptions& options,
                   std::vector<at::Tensor>* norm_excluded);

// The parameter groups showed MoE experts split over ranks: records it, refusing what they cannot train with.
void add_experts(Layout& layout, const Config& config, const InitializeOptions& options);

}  // namespace deepspeed::runtime
