// Tensor parallelism in the engine (`tensor_parallel.autotp_size`): the groups, AutoTP on a model written for one
// device, and which parameters count in the global gradient norm.
//
// The tensor-parallel ranks of one replica are the engine's model-parallel group (gradient norm and fp16 overflow
// agreed over it, checkpoint files mp_rank_<tp rank>); the ranks holding the same slice of every replica are its
// data-parallel world (gradients averaged, ZeRO 1/2 partitions). Parameters the layers do not split (LayerNorms,
// row-parallel biases, position embeddings) are whole and equal on every tensor rank: tensor rank 0 alone counts them
// in the norm, as Megatron's param_is_not_tensor_parallel_duplicate does.
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <unordered_set>

#include "deepspeed/error.h"
#include "deepspeed/tp/auto_tp.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"
#include "runtime/engine_impl.h"

namespace deepspeed {
namespace {

tp::LayerSpec to_spec(const config::TpLayerSpecConfig& c) {
  tp::LayerSpec s;
  s.patterns = c.patterns;
  s.partition = tp::parse_partition(c.partition_type);
  s.fused_parts = c.fused_parts;
  s.gather_output = c.gather_output;
  return s;
}

// The config's partition_config as a policy: its specs first, the LM head's placement, then the built-in names.
tp::AutoTpPolicy policy_of(const config::TensorParallelConfig& c) {
  tp::AutoTpPolicy p;
  for (const auto& s : c.layer_specs) p.specs.push_back(to_spec(s));
  if (!c.lm_head_patterns.empty() || c.vocab_parallel_lm_head.has_value()) {
    tp::LayerSpec head;
    const std::vector<std::string> names =
        c.lm_head_patterns.empty() ? std::vector<std::string>{"lm_head", "embed_out"} : c.lm_head_patterns;
    for (const std::string& n : names) head.patterns.push_back("(^|\\.)" + n + "\\.weight$");
    head.partition = c.vocab_parallel_lm_head.value_or(true) ? tp::Partition::kVocab : tp::Partition::kSkip;
    p.specs.push_back(head);
  }
  if (c.use_default_specs) {
    const tp::AutoTpPolicy defaults = tp::AutoTpPolicy::defaults();
    p.specs.insert(p.specs.end(), defaults.specs.begin(), defaults.specs.end());
  }
  p.keep_unmatched = !c.strict_mode;
  return p;
}

}  // namespace

void EngineImpl::setup_tensor_parallel(InitializeOptions& options) {
  // A caller that lays out the groups itself (the pipeline engine, whose topology's "model" axis is the tensor-parallel
  // one) has checked the layers against them and passes the norm's exclusions.
  if (options.data_parallel_group.is_member() || options.model_parallel_group.is_member()) {
    DS_CHECK_T(ConfigError, config_.tensor_parallel.autotp_size <= 1, "tensor_parallel.autotp_size: with "
               "InitializeOptions::data_parallel_group / model_parallel_group the caller lays out the ranks; leave "
               "the tensor-parallel layout to it");
    return;
  }
  int model_tp = 0;
  tp::sharded_parameters(*module_, &model_tp);
  const int tp_size = std::max(config_.tensor_parallel.autotp_size, 1);
  DS_CHECK_T(ConfigError, model_tp == 0 || model_tp == tp_size, "tensor_parallel.autotp_size: the model's layers are "
             "split over ", model_tp, " ranks (deepspeed::tp layers); set autotp_size to ", model_tp, ", got ",
             config_.tensor_parallel.autotp_size);
  DS_CHECK_T(ConfigError, tp_size > 1 || !config_.tensor_parallel.tp_overlap_comm, "tensor_parallel.tp_overlap_comm "
             "overlaps the tensor-parallel all-reduces: it needs autotp_size > 1, got ",
             config_.tensor_parallel.autotp_size);
  if (tp_size == 1) return;
  DS_CHECK_T(ConfigError, config_.zero.stage <= 2, "tensor_parallel.autotp_size: AutoTP training works with "
             "zero_optimization.stage 0, 1 or 2 (as in DeepSpeed), got ", config_.zero.stage);
  const tp::TensorParallelGroups groups = tp::tensor_parallel_groups(tp_size);
  if (model_tp == 0) {
    DS_CHECK_T(ConfigError, !options.optimizer, "tensor_parallel.autotp_size: AutoTP replaces the model's layers, "
               "so a client optimizer built over them would step the old ones; name the optimizer in the config");
    tp::auto_tp(*module_, groups.tensor_parallel, policy_of(config_.tensor_parallel));
  }
  tp::set_overlap_comm(*module_, config_.tensor_parallel.tp_overlap_comm);
  options.data_parallel_group = groups.data_parallel;
  options.model_parallel_group = groups.tensor_parallel;
  tensor_parallel_ = true;
  if (groups.tensor_parallel.rank() == 0) return;
  std::unordered_set<const void*> sharded;
  for (const at::Tensor& p : tp::sharded_parameters(*module_)) sharded.insert(p.unsafeGetTensorImpl());
  for (const at::Tensor& p : module_->parameters())
    if (p.requires_grad() && sharded.count(p.unsafeGetTensorImpl()) == 0) options.norm_excluded_params.push_back(p);
}

runtime::TensorSlicing EngineImpl::tensor_slicing() const {
  if (!tensor_parallel_) return pipeline_slicing_;
  return runtime::TensorSlicing{model_parallel_.rank(), model_parallel_.size(), tp::split_layout(*module_)};
}

}  // namespace deepspeed
