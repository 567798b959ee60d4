#include "runtime/layout.h"

#include <algorithm>

#include "config/feature_gate.h"
#include "deepspeed/error.h"
#include "sequence/apply.h"
#include "tp/apply.h"

namespace deepspeed::runtime {

void check_degrees(const Config& config, const InitializeOptions& options) {
  const int world = comm::get_world_size();
  const bool caller_layout = options.data_parallel_group.is_member() || options.model_parallel_group.is_member();
  const int tp = std::max(config.tensor_parallel.autotp_size, 1), sp = config.sequence_parallel_size;
  DS_CHECK_T(ConfigError, tp == 1 || !caller_layout, "tensor_parallel.autotp_size: with "
             "InitializeOptions::data_parallel_group / model_parallel_group the caller lays out the ranks; leave the "
             "tensor-parallel layout to it");
  config::apply_rules(config::parallel_rules(), config);  // the config's own combinations, as the gate has them
  DS_CHECK_T(ConfigError, sp == 1 || !caller_layout,
             "sequence_parallel_size: Ulysses does not combine with a caller's data- or model-parallel groups (a "
             "pipeline's stages) yet");
  if (const int h = config.zero.zero_hpz_partition_size; h > 1) {
    // A caller's groups that change nothing (its data-parallel group the world, a model-parallel group of one rank)
    // leave the data-parallel group the whole world.
    const bool split = (options.data_parallel_group.is_member() && options.data_parallel_group.size() != world) ||
                       (options.model_parallel_group.is_member() && options.model_parallel_group.size() > 1);
    DS_CHECK_T(ConfigError, tp == 1 && !split, "zero_optimization.zero_hpz_partition_size: secondary "
               "partitions need the data-parallel group to be the whole world (not inside a pipeline or another "
               "data-parallel layout)");
    // Ranks are numbered host by host (the launcher's RANK = node * ranks per host + local rank), so groups of h
    // consecutive ranks stay on one host when h divides the ranks per host.
    const int local = comm::get_local_world_size();
    DS_CHECK_T(ConfigError, local % h == 0, "zero_optimization.zero_hpz_partition_size ", h,
               " must divide the ranks per host (", local, ", LOCAL_WORLD_SIZE): a secondary partition group would "
               "span hosts");
  }
  DS_CHECK_T(ConfigError, world % tp == 0, "tensor_parallel.autotp_size (", tp, ") must divide the world of ", world,
             " ranks");
  DS_CHECK_T(ConfigError, world % sp == 0, "sequence_parallel_size (", sp, ") must divide the world of ", world,
             " ranks");
}

Layout make_layout(torch::nn::Module& module, const Config& config, InitializeOptions& options,
                   std::vector<at::Tensor>* norm_excluded) {
  check_degrees(config, options);
  Layout layout;
  layout.tensor_parallel = tp::apply(module, config, options);
  layout.data_parallel =
      options.data_parallel_group.is_member() ? options.data_parallel_group : comm::get_world_group();
  if (options.model_parallel_group.is_member() && options.model_parallel_group.size() > 1)
    layout.model_parallel = options.model_parallel_group;
  layout.whole_world = !layout.model_parallel.is_member() && !options.data_parallel_group.is_member();
  *norm_excluded = std::move(options.norm_excluded_params);
  DS_CHECK_T(ConfigError, norm_excluded->empty() || layout.model_parallel.is_member(),
             "initialize: norm_excluded_params needs a model_parallel_group of more than one rank");
  DS_CHECK_T(ConfigError,
             !layout.model_parallel.is_member() || layout.tensor_parallel || config.zero.stage <= 1,
             "initialize: a model_parallel_group works with zero_optimization.stage 0 or 1, got ", config.zero.stage);
  layout.sequence_parallel = sequence::apply(module, config, options, layout.tensor_parallel);
  return layout;
}

void add_experts(Layout& layout, const Config& config, const InitializeOptions& options) {
  layout.experts = true;
  DS_CHECK_T(ConfigError, config.zero.stage <= 2,
             "zero_optimization.stage: MoE expert parallelism (ep_size > 1) works with stages 0-2, got ",
             config.zero.stage);
  DS_CHECK_T(ConfigError, layout.whole_world,
             "initialize: MoE expert parallelism (ep_size > 1) is not supported inside a pipeline or another "
             "data-parallel layout; its groups are formed over the whole world");
  DS_CHECK_T(ConfigError, !options.optimizer && !options.lr_scheduler,
             "initialize: a client optimizer or LR scheduler sees one parameter group where the engine keeps the "
             "MoE experts (ep_size > 1) in groups of their own; name the optimizer and scheduler in the config");
  DS_CHECK_T(ConfigError, config.zero.offload_optimizer.device != config::OffloadDevice::kNvme,
             "zero_optimization.offload_optimizer.device: nvme is not supported with MoE expert parallelism "
             "(ep_size > 1); use \"cpu\" or none");
}

}  // namespace deepspeed::runtime
