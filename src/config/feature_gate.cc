#include "config/feature_gate.h"

#include <cstdint>
#include <limits>
#include <string>

#include "config/rule_table.h"
#include "deepspeed/error.h"

namespace deepspeed::config {
namespace {

// pipeline.partition, seed_layers or activation_checkpoint_interval: keys only a PipelineModule takes.
bool names_module_keys(const config::PipelineConfig& pc) {
  return pc.partition != "best" || pc.seed_layers || pc.activation_checkpoint_interval > 0;
}

// A feature DeepSpeed has and this build does not yet, refused by the key that asks for it.
Rule feature_rule(std::string key, std::string when, std::string example, std::function<bool(const Config&)> on,
                  const std::string& feature) {
  const std::string text = key + ": " + feature + " is not implemented in this build of deepspeed-cpp yet";
  return Rule{std::move(key), std::move(when), std::move(example), std::move(on),
              [text](const Config&) { return text; }};
}

std::vector<Rule> zero_feature_rules() {
  const std::string z = "zero_optimization.";
  return {
      feature_rule(
          z + "offload_optimizer.ratio", "< 1 at stage 3",
          zero_example(R"("stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.5})"),
          [](const Config& c) { return c.zero.stage == 3 && c.zero.offload_optimizer.ratio < 1.0; },
          "partial optimizer offload (ratio < 1)"),
      feature_rule(
          z + "stage3_model_persistence_threshold", "set at stage 3",
          zero_example(R"("stage": 3, "stage3_model_persistence_threshold": 100000)"),
          [](const Config& c) {
            return c.zero.stage == 3 && c.zero.model_persistence_threshold != std::numeric_limits<int64_t>::max();
          },
          "a model-wide persistence budget"),
      feature_rule(
          z + "stage3_module_granularity_threshold", "> 0 at stage 3",
          zero_example(R"("stage": 3, "stage3_module_granularity_threshold": 1000)"),
          [](const Config& c) { return c.zero.stage == 3 && c.zero.module_granularity_threshold > 0; },
          "automatic grouping of small modules into units (mark units with zero::shard)"),
      feature_rule(
          z + "use_all_reduce_for_fetch_params", "true, or `stage3_allgather_sequential` true, at stage 3",
          zero_example(R"("stage": 3, "stage3_allgather_sequential": true)"),
          [](const Config& c) {
            return c.zero.stage == 3 && (c.zero.use_all_reduce_for_fetch_params || c.zero.allgather_sequential);
          },
          "fetching parameters by all-reduce or sequentially"),
      feature_rule(
          z + "reduce_scatter", "false at stage 3", zero_example(R"("stage": 3, "reduce_scatter": false)"),
          [](const Config& c) { return c.zero.stage == 3 && !c.zero.reduce_scatter; },
          "stage 3 with all-reduced gradients (stage 3 always reduce-scatters to the owners; remove the "
          "key)"),
      feature_rule(
          z + "contiguous_gradients", "false at stage 2", zero_example(R"("stage": 2, "contiguous_gradients": false)"),
          [](const Config& c) { return !c.zero.contiguous_gradients && c.zero.stage == 2; },
          "stage 2 without contiguous gradient buckets (deepspeed-cpp always copies gradients into "
          "contiguous buckets; remove the key or set it to true)"),
      feature_rule(
          z + "legacy_stage1", "true", zero_example(R"("stage": 1, "legacy_stage1": true)"),
          [](const Config& c) { return c.zero.legacy_stage1; }, "the legacy stage-1 implementation"),
      feature_rule(
          z + "zero_quantized_nontrainable_weights", "true",
          zero_example(R"("stage": 3, "zero_quantized_nontrainable_weights": true)"),
          [](const Config& c) { return c.zero.zero_quantized_nontrainable_weights; },
          "quantized gathers of frozen parameters (stage 3 keeps parameters that require no gradient whole "
          "on every rank, so none of theirs is gathered)"),
      feature_rule(
          z + "mics_shard_size", "> 0", zero_example(R"("stage": 3, "mics_shard_size": 2)"),
          [](const Config& c) { return c.zero.mics_shard_size > 0; }, "MiCS sharding"),
      feature_rule(
          z + "zenflow.offload", "true",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"offload": true})"),
          [](const Config& c) { return c.zero.zenflow && c.zero.zenflow->offload; },
          "the selective optimizer's states in host memory"),
      feature_rule(
          z + "zenflow.pt_reserved_cores_perc", "set",
          zero_example(R"("stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"pt_reserved_cores_perc": )"
                       R"(0.5})"),
          [](const Config& c) { return c.zero.zenflow && c.zero.zenflow->pt_reserved_cores_perc.has_value(); },
          "pinning training and optimizer threads to separate cores"),
      // DeepSpeed (stages 1-2) reorders the parameters in its flat buffers for round_robin_gradients; the update is
      // the same, but Python DeepSpeed's files would list them in that order, which ours do not follow.
      feature_rule(
          z + "round_robin_gradients", "true at stage 1-2 with `checkpoint.save_layout` `\"python_deepspeed\"`",
          R"({"checkpoint": {"save_layout": "python_deepspeed"}, )"
          R"("zero_optimization": {"stage": 2, "round_robin_gradients": true}})",
          [](const Config& c) {
            return c.zero.round_robin_gradients && (c.zero.stage == 1 || c.zero.stage == 2) &&
                   c.checkpoint.save_python_layout;
          },
          "round-robin gradient order in a checkpoint.save_layout \"python_deepspeed\" checkpoint (the "
          "update is the same without it; set it false or save in the deepspeed_cpp layout)"),
  };
}

std::vector<Rule> other_feature_rules() {
  return {
      feature_rule(
          "fp16.auto_cast", "true with fp16", R"({"fp16": {"enabled": true, "auto_cast": true}})",
          [](const Config& c) { return c.fp16.enabled && c.fp16.auto_cast; }, "autocasting the model's inputs"),
      feature_rule(
          "sparse_gradients", "true", R"({"sparse_gradients": true})",
          [](const Config& c) { return c.sparse_gradients; }, "sparse gradient all-reduce"),
      feature_rule(
          "graph_harvesting", "true", R"({"graph_harvesting": true})",
          [](const Config& c) { return c.graph_harvesting; }, "CUDA graph harvesting"),
      feature_rule(
          "disable_allgather", "true", R"({"disable_allgather": true})",
          [](const Config& c) { return c.disable_allgather; },
          "replacing the parameter all-gather with broadcasts (use zero_optimization.allgather_partitions "
          "false)"),
  };
}

const char kPythonLayout[] = "checkpoint.save_layout: python_deepspeed";
// The refusals the config's rules and the model's half (check_python_layout) share.
const char kNoTensorParallel[] = " is not supported with tensor parallelism (tensor_parallel.autotp_size > 1)";
const char kNoMoeOrPipeline[] = " does not write MoE or pipeline checkpoints";
const char kNeedsAdam[] =
    " needs the config's Adam or AdamW optimizer (DeepSpeed's files hold its exp_avg and exp_avg_sq)";

// What Python DeepSpeed's checkpoint files hold (checkpoint/deepspeed_export.h), from the config alone.
std::vector<Rule> python_layout_rules() {
  const std::string layout = R"({"checkpoint": {"save_layout": "python_deepspeed"}, )";
  auto on = [](const Config& c) { return c.checkpoint.save_python_layout; };
  return {
      make_rule(
          "checkpoint.save_layout", "\"python_deepspeed\" with fp16", layout + R"("fp16": {"enabled": true}})",
          [on](const Config& c) { return on(c) && c.fp16.enabled; },
          std::string(kPythonLayout) + " writes fp32 and bf16 checkpoints; fp16 is not supported"),
      make_rule(
          "checkpoint.save_layout", "\"python_deepspeed\" with an optimizer other than Adam/AdamW",
          layout + R"("optimizer": {"type": "Lion", "params": {"lr": 0.001}}})",
          [on](const Config& c) {
            return on(c) && c.optimizer && c.optimizer->type != "adam" && c.optimizer->type != "adamw";
          },
          std::string(kPythonLayout) + kNeedsAdam),
      make_rule(
          "checkpoint.save_layout", "\"python_deepspeed\" with tensor parallelism",
          layout + R"("tensor_parallel": {"autotp_size": 2}})",
          [on](const Config& c) { return on(c) && c.tensor_parallel.enabled(); },
          std::string(kPythonLayout) + kNoTensorParallel),
  };
}

std::vector<Rule> make_parallel_rules() {
  auto tp = [](const Config& c) { return c.tensor_parallel.enabled(); };
  return {
      make_rule(
          "tensor_parallel.autotp_size", "> 1 at stage 3",
          R"({"tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3}})",
          [tp](const Config& c) { return tp(c) && c.zero.stage > 2; },
          [](const Config& c) {
            return ::deepspeed::detail::str_cat(
                "tensor_parallel.autotp_size: AutoTP training works with zero_optimization.stage 0, 1 or 2 (as "
                "in DeepSpeed), got ",
                c.zero.stage);
          }),
      make_rule(
          "sequence_parallel_size", "> 1 with `tensor_parallel.autotp_size` > 1",
          R"({"tensor_parallel": {"autotp_size": 2}, "sequence_parallel_size": 2})",
          [tp](const Config& c) { return tp(c) && c.sequence_parallel_size > 1; },
          "sequence_parallel_size: Ulysses does not combine with tensor parallelism (tensor_parallel.autotp_size "
          "> 1) yet"),
      make_rule(
          "tensor_parallel.tp_overlap_comm", "true without `autotp_size` > 1",
          R"({"tensor_parallel": {"tp_overlap_comm": true}})",
          [tp](const Config& c) { return c.tensor_parallel.tp_overlap_comm && !tp(c); },
          [](const Config& c) {
            return ::deepspeed::detail::str_cat(
                "tensor_parallel.tp_overlap_comm overlaps the tensor-parallel all-reduces: it needs autotp_size "
                "> 1, got ",
                c.tensor_parallel.autotp_size);
          }),
  };
}

// What the pipeline section and the monitors may ask of deepspeed::initialize.
std::vector<Rule> engine_wide_rules() {
  return {
      // The pipeline engine consumes the pipeline section before its stage engines see the config.
      Rule{"pipeline.stages", "> 1 (with deepspeed::initialize)", R"({"pipeline": {"stages": 2}})",
           [](const Config& c) { return c.pipeline.stages.has_value() && *c.pipeline.stages > 1; },
           [](const Config& c) {
             return ::deepspeed::detail::str_cat("pipeline.stages ", *c.pipeline.stages,
                                                 ": a pipeline is built with deepspeed::pipe::initialize from a "
                                                 "PipelineModule, not deepspeed::initialize");
           }},
      make_rule(
          "pipeline", "`partition`, `seed_layers` or `activation_checkpoint_interval` (with deepspeed::initialize)",
          R"({"pipeline": {"seed_layers": true}})", [](const Config& c) { return names_module_keys(c.pipeline); },
          "pipeline: partition, seed_layers and activation_checkpoint_interval apply to a PipelineModule "
          "(deepspeed::pipe::initialize), not to deepspeed::initialize"),
      make_rule(
          "wandb.enabled", "true", R"({"wandb": {"enabled": true}})",
          [](const Config& c) { return c.monitor.wandb.enabled; },
          "wandb.enabled: Weights & Biases has no C++ client, so deepspeed-cpp cannot log to it; use csv_monitor "
          "(its files can be uploaded with wandb's own tools)"),
  };
}

std::vector<Rule> make_pipeline_rules() {
  const std::string pipe = R"({"pipeline": {"stages": 2}, )";
  return {
      Rule{"zero_optimization.stage", "2 or 3", pipe + R"("zero_optimization": {"stage": 2}})",
           [](const Config& c) { return c.zero.stage > 1; },
           [](const Config& c) {
             return ::deepspeed::detail::str_cat("zero_optimization.stage ", c.zero.stage,
                                                 " is not supported with pipeline parallelism (as in DeepSpeed): use "
                                                 "stage 0 or 1");
           }},
      make_rule(
          "checkpoint.save_layout", "\"python_deepspeed\"",
          pipe + R"("checkpoint": {"save_layout": "python_deepspeed"}})",
          [](const Config& c) { return c.checkpoint.save_python_layout; },
          std::string(kPythonLayout) + kNoMoeOrPipeline),
      make_rule(
          "autotuning", "`metric_path` set with autotuning enabled",
          pipe + R"("autotuning": {"enabled": true, "metric_path": "/tmp/metric.json"}})",
          [](const Config& c) { return c.autotuning.enabled && c.autotuning.metric_path.has_value(); },
          "autotuning: the autotuner tunes deepspeed::initialize runs; the pipeline engine does not report "
          "autotuning metrics (drop autotuning.metric_path)"),
      // DeepSpeed's pipeline engine profiles through its stage modules' hooks; here a stage's forward is a stream of
      // instructions over micro-batches, which the flops profiler's per-step driver does not follow yet.
      make_rule(
          "flops_profiler.enabled", "true", pipe + R"("flops_profiler": {"enabled": true}})",
          [](const Config& c) { return c.flops_profiler.enabled; },
          "flops_profiler.enabled: the flops profiler is not supported by the pipeline engine yet; profile the "
          "model with deepspeed::initialize or deepspeed::profiling::FlopsProfiler"),
      // partition and seed_layers belong to PipelineModuleOptions: the module is split before the config is read.
      Rule{"pipeline.partition", "other than \"best\"", R"({"pipeline": {"stages": 2, "partition": "uniform"}})",
           [](const Config& c) { return c.pipeline.partition != "best"; },
           [](const Config& c) {
             return "pipeline.partition \"" + c.pipeline.partition +
                    "\": set PipelineModuleOptions::partition_method instead (parameters, uniform, type:<regex>, "
                    "boundaries)";
           }},
      make_rule(
          "pipeline.seed_layers", "true", R"({"pipeline": {"stages": 2, "seed_layers": true}})",
          [](const Config& c) { return c.pipeline.seed_layers; },
          "pipeline.seed_layers: set PipelineModuleOptions::base_seed instead (layers are built with the module)"),
      make_rule(
          "sequence_parallel_size", "> 1", pipe + R"("sequence_parallel_size": 2})",
          [](const Config& c) { return c.sequence_parallel_size != 1; },
          "sequence_parallel_size: Ulysses does not combine with pipeline parallelism yet"),
      // The stages reduce tied weights' accumulated gradients in fp32 (accumulated_grad); DeepSpeed too accumulates
      // a pipeline's gradients in fp32 (its BF16_Optimizer) whatever grad_accum_dtype says.
      Rule{"data_types.grad_accum_dtype", "16-bit",
           pipe + R"("bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}})",
           [](const Config& c) { return c.data_types.grad_accum_dtype.value_or(DataType::kFp32) != DataType::kFp32; },
           [](const Config& c) {
             return std::string("data_types.grad_accum_dtype \"") + to_string(*c.data_types.grad_accum_dtype) +
                    "\": a pipeline accumulates its gradients in fp32 (as DeepSpeed's does); leave it unset or fp32";
           }},
      make_rule(
          "bf16.bf16_master_weights_and_grads", "true",
          pipe + R"("bf16": {"enabled": true, "bf16_master_weights_and_grads": true, )"
                 R"("bf16_optimizer_states": true}, "zero_optimization": {"stage": 1}})",
          [](const Config& c) { return c.bf16.bf16_master_weights_and_grads; },
          "bf16.bf16_master_weights_and_grads: a pipeline keeps fp32 masters and gradients; not supported with it"),
      make_rule(
          "fp16.fp16_master_weights_and_grads", "true",
          pipe + R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true}, )"
                 R"("zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})",
          [](const Config& c) { return c.fp16.fp16_master_weights_and_grads; },
          "fp16.fp16_master_weights_and_grads: a pipeline keeps fp32 masters and gradients; not supported with it"),
  };
}

}  // namespace

const std::vector<Rule>& feature_rules() {
  static const std::vector<Rule> kRules = [] {
    std::vector<Rule> rules = zero_feature_rules();
    for (Rule& r : other_feature_rules()) rules.push_back(std::move(r));
    return rules;
  }();
  return kRules;
}

const std::vector<Rule>& combination_rules() {
  static const std::vector<Rule> kRules = [] {
    std::vector<Rule> rules = offload_and_zenflow_rules();
    for (auto part : {precision_and_optimizer_rules, python_layout_rules, make_parallel_rules, engine_wide_rules})
      for (Rule& r : part()) rules.push_back(std::move(r));
    return rules;
  }();
  return kRules;
}

const std::vector<Rule>& parallel_rules() {
  static const std::vector<Rule> kRules = make_parallel_rules();
  return kRules;
}

const std::vector<Rule>& pipeline_rules() {
  static const std::vector<Rule> kRules = make_pipeline_rules();
  return kRules;
}

std::string feature_rules_markdown() {
  return rules_markdown(feature_rules(),
                        [](const std::string& example) { check_config_alone(Config::from_string(example)); });
}

std::string combination_rules_markdown() {
  return rules_markdown(combination_rules(),
                        [](const std::string& example) { check_supported_features(Config::from_string(example)); });
}

std::string pipeline_rules_markdown() {
  return rules_markdown(pipeline_rules(),
                        [](const std::string& example) { check_pipeline_features(Config::from_string(example)); });
}

std::string activation_checkpointing_problem(const ActivationCheckpointingConfig& s) {
  if (s.contiguous_memory_optimization && !s.partition_activations)
    return "activation_checkpointing.contiguous_memory_optimization: needs partition_activations true (as in "
           "DeepSpeed, contiguous checkpointing stores the partitioned activations)";
  if (s.contiguous_memory_optimization && !s.number_checkpoints)
    return "activation_checkpointing.number_checkpoints: required with contiguous_memory_optimization (the number "
           "of checkpointed segments in one forward pass sizes the contiguous buffer)";
  if (s.number_checkpoints && *s.number_checkpoints < 1)
    return ::deepspeed::detail::str_cat("activation_checkpointing.number_checkpoints: expected at least 1, got ",
                                        *s.number_checkpoints);
  return "";
}

int64_t zenflow_select_iterations(const ZenFlowConfig& c) {
  if (c.select_strategy == "step") return *c.select_interval;
  // "epoch", and "auto" (= every epoch): DeepSpeed counts an epoch in its dataloader's steps and, with none, selects
  // only once (0 here); steps_per_epoch stands in for the dataloader.
  return c.steps_per_epoch ? c.select_interval.value_or(1) * *c.steps_per_epoch : 0;
}

std::string zenflow_schedule_problem(const ZenFlowConfig& c) {
  const int64_t select = zenflow_select_iterations(c);
  if (!c.update_interval || select == 0 || select >= *c.update_interval) return "";
  return ::deepspeed::detail::str_cat("zero_optimization.zenflow: the selection interval (", select,
                                      " iterations) must be at least update_interval (", *c.update_interval, ")");
}

void check_whole_tensor_step(const std::string& type, const char* clash) {
  if (clash) throw ConfigError(whole_tensor_message(type, clash));
}

void check_python_layout(const config::Config& cfg, const PythonLayoutModel* model) {
  if (!cfg.checkpoint.save_python_layout) return;
  apply_rules(python_layout_rules(), cfg);
  if (!model) return;
  DS_CHECK_T(ConfigError, model->adam_states, kPythonLayout, kNeedsAdam);
  DS_CHECK_T(ConfigError, !model->tensor_parallel, kPythonLayout, kNoTensorParallel);
  DS_CHECK_T(ConfigError, !model->experts && model->whole_world, kPythonLayout, kNoMoeOrPipeline);
}

void check_supported_features(const config::Config& cfg) {
  apply_rules(feature_rules(), cfg);
  apply_rules(combination_rules(), cfg);
}

void check_pipeline_features(const config::Config& cfg) { apply_rules(pipeline_rules(), cfg); }

void check_config_alone(const config::Config& cfg) {
  // A pipeline's config: more than one stage, or a key only a PipelineModule takes (pipe::initialize also runs a
  // single stage, and takes the stage count from the module when the config leaves it out).
  const config::PipelineConfig& pc = cfg.pipeline;
  if (!names_module_keys(pc) && (!pc.stages || *pc.stages <= 1)) {
    check_supported_features(cfg);
    return;
  }
  check_pipeline_features(cfg);
  config::Config stage = cfg;
  stage.pipeline = config::PipelineConfig{};  // consumed by the pipeline engine, as pipe::initialize does
  check_supported_features(stage);
}

}  // namespace deepspeed::config
