// Ulysses sequence parallelism in the engine (`sequence_parallel_size` P): the model's DistributedAttention layers
// must be built over groups of P ranks (deepspeed::sequence::sequence_parallel_groups). To everything but attention
// the P ranks of a group are data-parallel replicas holding other tokens of the same samples, so the engine keeps the
// whole world as its data-parallel world (gradients averaged over every rank: the mean over all tokens of the global
// batch when each rank's loss is the mean over its tokens, ZeRO partitions over every rank) and counts the global
// batch over world / P ranks, as DeepSpeed's seq_data_parallel_group does.
#include <torch/nn/module.h>

#include "deepspeed/error.h"
#include "deepspeed/sequence/layer.h"
#include "runtime/engine_impl.h"

namespace deepspeed {

void EngineImpl::setup_sequence_parallel(const InitializeOptions& options) {
  const int sp = config_.sequence_parallel_size;
  int layers = 0, model_sp = 0;
  for (const auto& m : module_->modules(/*include_self=*/true)) {
    const auto* attention = dynamic_cast<const sequence::DistributedAttentionImpl*>(m.get());
    if (attention == nullptr) continue;
    ++layers;
    const int size = attention->group().size();
    DS_CHECK_T(ConfigError, model_sp == 0 || model_sp == size, "sequence_parallel_size: the model's DistributedAttention "
               "layers use groups of ", model_sp, " and ", size, " ranks; build them over one group");
    model_sp = size;
  }
  DS_CHECK_T(ConfigError, layers == 0 || model_sp == sp, "sequence_parallel_size: the model's DistributedAttention "
             "layers split sequences over ", model_sp, " ranks; set sequence_parallel_size to ", model_sp, ", got ", sp);
  if (sp == 1) return;
  DS_CHECK_T(ConfigError, layers > 0, "sequence_parallel_size: ", sp, " ranks would split each sequence, but the model "
             "has no deepspeed::sequence::DistributedAttention layer to exchange them; build its attention with one");
  DS_CHECK_T(ConfigError, !tensor_parallel_ && !options.data_parallel_group.is_member() &&
                              !options.model_parallel_group.is_member(),
             "sequence_parallel_size: Ulysses does not combine with tensor or pipeline parallelism yet");
  sequence::sequence_parallel_groups(sp);  // the layout the layers use; checks that sp divides the world
  sequence_parallel_ = sp;
}

}  // namespace deepspeed
