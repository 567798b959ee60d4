#include "tp/apply.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/tp/auto_tp.h"
#include "deepspeed/tp/groups.h"
#include "deepspeed/tp/parallel_linear.h"

namespace deepspeed::tp {
namespace {

LayerSpec to_spec(const config::TpLayerSpecConfig& c) {
  LayerSpec s;
  s.patterns = c.patterns;
  s.partition = parse_partition(c.partition_type);
  s.fused_parts = c.fused_parts;
  s.gather_output = c.gather_output;
  return s;
}

// The config's partition_config as a policy: its specs first, the LM head's placement, then the built-in names.
AutoTpPolicy policy_of(const config::TensorParallelConfig& c) {
  AutoTpPolicy p;
  for (const auto& s : c.layer_specs) p.specs.push_back(to_spec(s));
  if (!c.lm_head_patterns.empty() || c.vocab_parallel_lm_head.has_value()) {
    LayerSpec head;
    const std::vector<std::string> names =
        c.lm_head_patterns.empty() ? std::vector<std::string>{"lm_head", "embed_out"} : c.lm_head_patterns;
    for (const std::string& n : names) head.patterns.push_back("(^|\\.)" + n + "\\.weight$");
    head.partition = c.vocab_parallel_lm_head.value_or(true) ? Partition::kVocab : Partition::kSkip;
    p.specs.push_back(head);
  }
  if (c.use_default_specs) {
    const AutoTpPolicy defaults = AutoTpPolicy::defaults();
    p.specs.insert(p.specs.end(), defaults.specs.begin(), defaults.specs.end());
  }
  p.keep_unmatched = !c.strict_mode;
  return p;
}

}  // namespace

bool apply(torch::nn::Module& module, const Config& config, InitializeOptions& options) {
  // A caller that lays out the groups itself (the pipeline engine, whose topology's "model" axis is the tensor-parallel
  // one) has checked the layers against them and passes the norm's exclusions (runtime::check_degrees refused an
  // autotp_size beside them).
  if (options.data_parallel_group.is_member() || options.model_parallel_group.is_member()) return false;
  int model_tp = 0;
  sharded_parameters(module, &model_tp);
  const int tp_size = std::max(config.tensor_parallel.autotp_size, 1);
  // (The model's layers against autotp_size, AutoTP with a client optimizer: config::initialize_rules, phase kModel;
  // tp_overlap_comm without autotp_size > 1: config::parallel_rules. Both checked by runtime::make_layout.)
  if (tp_size == 1) return false;
  const TensorParallelGroups groups = tensor_parallel_groups(tp_size);
  if (model_tp == 0) auto_tp(module, groups.tensor_parallel, policy_of(config.tensor_parallel));
  set_overlap_comm(module, config.tensor_parallel.tp_overlap_comm);
  options.data_parallel_group = groups.data_parallel;
  options.model_parallel_group = groups.tensor_parallel;
  if (groups.tensor_parallel.rank() == 0) return true;
  std::unordered_set<const void*> sharded;
  for (const at::Tensor& p : sharded_parameters(module)) sharded.insert(p.unsafeGetTensorImpl());
  for (const at::Tensor& p : module.parameters())
    if (p.requires_grad() && sharded.count(p.unsafeGetTensorImpl()) == 0) options.norm_excluded_params.push_back(p);
  return true;
}

}  // namespace deepspeed::tp
