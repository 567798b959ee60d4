#include "sequence/apply.h"

#include "deepspeed/error.h"
#include "deepspeed/sequence/layer.h"

namespace deepspeed::sequence {

int apply(const torch::nn::Module& module, const Config& config, const InitializeOptions& options,
          bool tensor_parallel) {
  const int sp = config.sequence_parallel_size;
  int layers = 0, model_sp = 0;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    const auto* attention = dynamic_cast<const DistributedAttentionImpl*>(m.get());
    if (attention == nullptr) continue;
    ++layers;
    const int size = attention->group().size();
    DS_CHECK_T(ConfigError, model_sp == 0 || model_sp == size, "sequence_parallel_size: the model's DistributedAttention "
               "layers use groups of ", model_sp, " and ", size, " ranks; build them over one group");
    model_sp = size;
  }
  DS_CHECK_T(ConfigError, layers == 0 || model_sp == sp, "sequence_parallel_size: the model's DistributedAttention "
             "layers split sequences over ", model_sp, " ranks; set sequence_parallel_size to ", model_sp, ", got ", sp);
  if (sp == 1) return 1;
  DS_CHECK_T(ConfigError, layers > 0, "sequence_parallel_size: ", sp, " ranks would split each sequence, but the model "
             "has no deepspeed::sequence::DistributedAttention layer to exchange them; build its attention with one");
  // (With tensor or pipeline parallelism it was refused by runtime::check_degrees.)
  sequence_parallel_groups(sp);  // the layout the layers use
  return sp;
}

}  // namespace deepspeed::sequence
