// The rules of implemented_values.h. Keys that change nothing by nature (logging hints, partitioning over an axis we
// refuse) are not here: the key table says "no effect" for them.
#include "config/implemented_values.h"

#include <sstream>

#include "config/sections.h"

namespace deepspeed::config {
namespace {

using Pred = std::function<bool(const Config&)>;

Rule rule(std::string key, std::string when, std::string example, Pred refused, std::string message) {
  const std::string text = key + ": " + message;
  return Rule{std::move(key), std::move(when), std::move(example), std::move(refused),
              [text](const Config&) { return text; }};
}

DataType training_dtype(const Config& c) {
  return c.bf16.enabled ? DataType::kBf16 : c.fp16.enabled ? DataType::kFp16 : DataType::kFp32;
}

// zero_optimization's rules.
std::vector<Rule> zero_rules() {
  const std::string z = "zero_optimization.";
  std::vector<Rule> rules = {
      rule(
          z + "use_multi_rank_bucket_allreduce",
          "true at stage 1/2 with reduce_scatter (DeepSpeed's default is true; ours is false)",
          zero_example(R"("stage": 2, "use_multi_rank_bucket_allreduce": true)"),
          [](const Config& c) {
            return c.zero.use_multi_rank_bucket_allreduce && (c.zero.stage == 1 || c.zero.stage == 2) &&
                   c.zero.reduce_scatter;
          },
          "true (all-reduce each bucket across ranks) is not implemented: deepspeed-cpp reduces each rank's slice "
          "of a bucket to its owner; set false or remove the key"),
      rule(
          z + "load_from_fp32_weights", "false", zero_example(R"("stage": 1, "load_from_fp32_weights": false)"),
          [](const Config& c) { return !c.zero.load_from_fp32_weights; },
          "false (rebuild the fp32 masters from the 16-bit weights on load) is not implemented: deepspeed-cpp "
          "restores the saved fp32 masters; set true or remove the key"),
      rule(
          z + "ignore_unused_parameters", "false", zero_example(R"("stage": 2, "ignore_unused_parameters": false)"),
          [](const Config& c) { return !c.zero.ignore_unused_parameters; },
          "false (fail when a parameter gets no gradient) is not implemented: deepspeed-cpp treats such gradients "
          "as zero; set true or remove the key"),
      rule(
          z + "memory_efficient_linear", "false at stage 3",
          zero_example(R"("stage": 3, "memory_efficient_linear": false)"),
          [](const Config& c) { return !c.zero.memory_efficient_linear && c.zero.stage == 3; },
          "false is not implemented: stage 3 always releases the gathered weights autograd saved and gathers them "
          "again for backward; set true or remove the key"),
      rule(
          z + "pipeline_loading_checkpoint", "true", zero_example(R"("pipeline_loading_checkpoint": true)"),
          [](const Config& c) { return c.zero.pipeline_loading_checkpoint; },
          "true (load checkpoints one local rank after another) is not implemented; set false or remove the key"),
      rule(
          z + "override_module_apply", "true at stage 3 (DeepSpeed's default is true; ours is false)",
          zero_example(R"("stage": 3, "override_module_apply": true)"),
          [](const Config& c) { return c.zero.override_module_apply && c.zero.stage == 3; },
          "true is not implemented: deepspeed-cpp cannot intercept torch::nn::Module::apply, so apply() on a "
          "stage-3 model sees this rank's partitions; initialize weights in the zero::shard factory instead and "
          "set false or remove the key"),
      rule(
          z + "enable_sanity_checks", "true", zero_example(R"("enable_sanity_checks": true)"),
          [](const Config& c) { return c.zero.enable_sanity_checks; },
          "true (DeepSpeed's extra stage-3 consistency checks) is not implemented; set false or remove the key"),
      rule(
          z + "parameter_alignment", "true", zero_example(R"("parameter_alignment": true)"),
          [](const Config& c) { return c.zero.parameter_alignment; },
          "true (pad the flat buffers so each parameter starts 16-byte aligned) is not implemented; set false or "
          "remove the key"),
      rule(
          z + "leaf_module", "`names` or `name_suffixes` not empty",
          zero_example(R"("leaf_module": {"names": ["mlp"]})"),
          [](const Config& c) {
            return !c.zero.leaf_module_names.empty() || !c.zero.leaf_module_name_suffixes.empty();
          },
          "names and name_suffixes are not implemented: mark those modules as stage-3 units with zero::shard "
          "(each unit is gathered whole); remove them"),
      rule(
          z + "mics_hierarchical_params_gather", "true", zero_example(R"("mics_hierarchical_params_gather": true)"),
          [](const Config& c) { return c.zero.mics_hierarchical_params_gather; },
          "true is not implemented: deepspeed-cpp has no MiCS sharding (DeepSpeed 0.19 removed it too); remove "
          "the key"),
  };
  return rules;
}

// The other sections' rules.
std::vector<Rule> other_rules() {
  std::vector<Rule> rules = {
      Rule{"data_types.param_dtype", "a dtype other than the training one (fp32, or the enabled fp16/bf16)",
           R"({"data_types": {"param_dtype": "bf16"}})",
           [](const Config& c) { return c.data_types.param_dtype && *c.data_types.param_dtype != training_dtype(c); },
           [](const Config& c) {
             return std::string("data_types.param_dtype: \"") + to_string(*c.data_types.param_dtype) +
                    "\" is not implemented: the parameters train in the fp16/bf16 section's dtype (" +
                    to_string(training_dtype(c)) + " here); set that or remove the key";
           }},
      rule(
          "data_types.buffer_dtype", "set", R"({"data_types": {"buffer_dtype": "fp16"}})",
          [](const Config& c) { return c.data_types.buffer_dtype.has_value(); },
          "casting the model's buffers to a dtype of their own is not implemented; remove the key"),
      rule(
          "data_types.keep_in_fp32_modules", "a non-empty list",
          R"({"data_types": {"keep_in_fp32_modules": ["norm"]}})",
          [](const Config& c) {
            return c.data_types.keep_in_fp32_modules && !c.data_types.keep_in_fp32_modules->empty();
          },
          "a list of modules to keep in fp32 is not implemented; use \"auto\" (a C++ model has no transformers "
          "list, so nothing is kept) or []"),
      rule(
          "managed_gradient_accumulation", "false", R"({"managed_gradient_accumulation": false})",
          [](const Config& c) { return !c.managed_gradient_accumulation; },
          "false (the caller manages gradient accumulation) is not implemented: the engine accumulates over "
          "gradient_accumulation_steps itself; set true or remove the key"),
      rule(
          "aio.use_gds", "true", R"({"aio": {"use_gds": true}})", [](const Config& c) { return c.aio.use_gds; },
          "true needs GPUDirect Storage, which deepspeed-cpp does not have; set false or remove the key"),
      Rule{"checkpoint.tag_validation", "`\"Warn\"` or `\"Ignore\"` (DeepSpeed's default is Warn; ours is Fail)",
           R"({"checkpoint": {"tag_validation": "Warn"}})",
           [](const Config& c) { return c.checkpoint.tag_validation != TagValidation::kFail; },
           [](const Config& c) {
             return std::string("checkpoint.tag_validation: \"") + to_string(c.checkpoint.tag_validation) +
                    "\" is not implemented: deepspeed-cpp always checks that every rank saves the same tag and "
                    "fails if not (\"Fail\"); set \"Fail\" or remove the key";
           }},
      rule(
          "checkpoint.use_node_local_storage", "true", R"({"checkpoint": {"use_node_local_storage": true}})",
          [](const Config& c) { return c.checkpoint.use_node_local_storage; },
          "true (each node writes its own copy) is not implemented: global rank 0 writes the model states to a "
          "shared directory; set false or remove the key"),
      rule(
          "checkpoint.parallel_write.pipeline_stage", "true",
          R"({"checkpoint": {"parallel_write": {"pipeline_stage": true}}})",
          [](const Config& c) { return c.checkpoint.parallel_write_pipeline_stage; },
          "true (spread a stage's layer files over its data-parallel ranks) is not implemented: data-parallel rank "
          "0 of each stage writes them; set false or remove the key"),
      rule(
          "dataloader_drop_last", "false (DeepSpeed's default is false; ours is true)",
          R"({"dataloader_drop_last": false})", [](const Config& c) { return !c.dataloader_drop_last; },
          "false is not implemented: deepspeed-cpp has no engine-built data loader, and DataParallelSampler always "
          "drops the last partial global batch; set true or remove the key"),
      rule(
          "use_data_before_expert_parallelism", "true", R"({"use_data_before_expert_parallelism": true})",
          [](const Config& c) { return c.use_data_before_expert_parallelism; },
          "true is not implemented: expert-parallel groups are consecutive ranks (DeepSpeed's default layout); set "
          "false or remove the key"),
  };
  // zero_allow_untested_optimizer true and zero_force_ds_cpu_optimizer false only permit, in DeepSpeed, a client
  // optimizer beside ZeRO (offloaded, for the second); by themselves they change nothing, as here. A client
  // optimizer passed to initialize() beside ZeRO is refused there by name (runtime::check_client_optimizer).
  // optimizer.params.torch_adam true picks torch.optim.Adam's implementation over DeepSpeed's fused one: the same
  // update (to rounding), which our fused kernel computes either way.
  return rules;
}

}  // namespace

const std::vector<Rule>& implemented_value_rules() {
  static const std::vector<Rule> kRules = [] {
    std::vector<Rule> rules = zero_rules();
    for (Rule& r : other_rules()) rules.push_back(std::move(r));
    return rules;
  }();
  return kRules;
}

void check_implemented_values(const Config& c) { apply_rules(implemented_value_rules(), c); }

std::string implemented_values_markdown() {
  return rules_markdown(implemented_value_rules(), [](const std::string& example) { Config::from_string(example); });
}

}  // namespace deepspeed::config
