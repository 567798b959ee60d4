#include "sequence/apply.h"

#include "deepspeed/error.h"
#include "deepspeed/sequence/layer.h"

namespace deepspeed::sequence {

int model_degree(const torch::nn::Module& module) {
  int model_sp = 0;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    const auto* attention = dynamic_cast<const DistributedAttentionImpl*>(m.get());
    if (attention == nullptr) continue;
    const int size = attention->group().size();
    DS_CHECK_T(ConfigError, model_sp == 0 || model_sp == size, "sequence_parallel_size: the model's DistributedAttention "
               "layers use groups of ", model_sp, " and ", size, " ranks; build them over one group");
    model_sp = size;
  }
  return model_sp;
}

int apply(const Config& config) {
  // (The model's layers against sequence_parallel_size, and the combinations with tensor or pipeline parallelism:
  // config::initialize_rules, checked by runtime::make_layout.)
  const int sp = config.sequence_parallel_size;
  if (sp > 1) sequence_parallel_groups(sp);  // the layout the layers use
  return sp;
}

}  // namespace deepspeed::sequence
