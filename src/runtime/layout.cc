#include "runtime/layout.h"

#include "deepspeed/error.h"
#include "sequence/apply.h"
#include "tp/apply.h"

namespace deepspeed::runtime {

Layout make_layout(torch::nn::Module& module, const Config& config, InitializeOptions& options,
                   std::vector<at::Tensor>* norm_excluded) {
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
