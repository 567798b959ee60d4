#include "runtime/layout.h"

#include <algorithm>

#include "config/feature_gate.h"
#include "config/initialize_rules.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"
#include "sequence/apply.h"
#include "tp/apply.h"

namespace deepspeed::runtime {

void check_degrees(const Config& config, const InitializeOptions& options) {
  config::apply_rules(config::parallel_rules(), config);  // the config's own combinations, as the gate has them
  config::InitializeFacts facts;
  facts.world = comm::get_world_size();
  // Asked only when it matters: a job without hpZ need not say how its ranks sit on hosts.
  facts.local_world = config.zero.zero_hpz_partition_size > 1 ? comm::get_local_world_size() : facts.world;
  facts.caller_groups = options.data_parallel_group.is_member() || options.model_parallel_group.is_member();
  // A caller's groups that change nothing (its data-parallel group the world, a model-parallel group of one rank)
  // leave the data-parallel group the whole world.
  facts.caller_splits_data =
      (options.data_parallel_group.is_member() && options.data_parallel_group.size() != facts.world) ||
      (options.model_parallel_group.is_member() && options.model_parallel_group.size() > 1);
  config::apply_initialize_rules(config::InitializePhase::kDegrees, config, facts);
}

Layout make_layout(torch::nn::Module& module, const Config& config, InitializeOptions& options,
                   std::vector<at::Tensor>* norm_excluded) {
  check_degrees(config, options);
  config::InitializeFacts model;
  model.caller_groups = options.data_parallel_group.is_member() || options.model_parallel_group.is_member();
  model.client_optimizer = options.optimizer != nullptr;
  tp::sharded_parameters(module, &model.layers_split);
  model.model_sp = sequence::model_degree(module);
  config::apply_initialize_rules(config::InitializePhase::kModel, config, model);
  Layout layout;
  layout.tensor_parallel = tp::apply(module, config, options);
  layout.data_parallel =
      options.data_parallel_group.is_member() ? options.data_parallel_group : comm::get_world_group();
  if (options.model_parallel_group.is_member() && options.model_parallel_group.size() > 1)
    layout.model_parallel = options.model_parallel_group;
  layout.whole_world = !layout.model_parallel.is_member() && !options.data_parallel_group.is_member();
  *norm_excluded = std::move(options.norm_excluded_params);
  config::InitializeFacts facts;
  facts.norm_excluded = !norm_excluded->empty();
  facts.model_parallel = layout.model_parallel.is_member();
  facts.tensor_parallel = layout.tensor_parallel;
  facts.whole_world = layout.whole_world;
  config::apply_initialize_rules(config::InitializePhase::kLayout, config, facts);
  layout.sequence_parallel = sequence::apply(config);
  return layout;
}

void add_experts(Layout& layout, const Config& config, const InitializeOptions& options) {
  layout.experts = true;
  config::InitializeFacts facts;
  facts.whole_world = layout.whole_world;
  facts.client_optimizer = options.optimizer != nullptr;
  facts.client_scheduler = options.lr_scheduler != nullptr;
  config::apply_initialize_rules(config::InitializePhase::kExperts, config, facts);
}

}  // namespace deepspeed::runtime
