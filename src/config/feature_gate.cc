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

// bf16.bf16_master_weights_and_grads (and bf16_optimizer_states), fp16.fp16_master_weights_and_grads: gradients,
// masters (and bf16 optimizer states) kept in the model's 16-bit dtype, stepped in fp32 a chunk at a time.
// DeepSpeed's rules: ZeRO stages 1-3; fp16 masters always with ZeRO-Offload (its CPU Adam keeps fp32 states); bf16
// ones without it only with bf16 states.
void check_model_dtype_masters(const config::Config& cfg) {
  const bool bf16 = cfg.bf16.bf16_master_weights_and_grads, fp16 = cfg.fp16.fp16_master_weights_and_grads;
  if (!bf16 && !fp16) return;
  DS_CHECK_T(ConfigError, !(bf16 && fp16), "bf16.bf16_master_weights_and_grads and "
             "fp16.fp16_master_weights_and_grads: choose one (they name the model's dtype)");
  const std::string key = bf16 ? "bf16.bf16_master_weights_and_grads" : "fp16.fp16_master_weights_and_grads";
  const std::string dtype = bf16 ? "bf16" : "fp16";
  DS_CHECK_T(ConfigError, bf16 ? cfg.bf16.enabled : cfg.fp16.enabled, key, ": needs ", dtype,
             ".enabled true (the masters are the model's ", dtype, " weights)");
  const config::ZeroConfig& z = cfg.zero;
  DS_CHECK_T(ConfigError, z.stage >= 1, key, ": needs zero_optimization.stage 1, 2 or 3, got ", z.stage);
  const config::OffloadOptimizerConfig& oo = z.offload_optimizer;
  if (bf16) {
    DS_CHECK_T(ConfigError, oo.enabled() || cfg.bf16.bf16_optimizer_states, key,
               ": without ZeRO-Offload the optimizer states must be bf16 too: set bf16.bf16_optimizer_states true "
               "(as DeepSpeed requires; with offload_optimizer \"cpu\" or \"nvme\" they may stay fp32)");
  } else {
    DS_CHECK_T(ConfigError, oo.enabled(), key,
               ": needs zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\" (as DeepSpeed requires: the "
               "CPU optimizer keeps fp32 states beside the fp16 masters)");
  }
  DS_CHECK_T(ConfigError, !z.zenflow, key, ": ZenFlow selects and steps on fp32 gradients; not supported with it");
  const auto& accum = cfg.data_types.grad_accum_dtype;
  const config::DataType model = bf16 ? config::DataType::kBf16 : config::DataType::kFp16;
  DS_CHECK_T(ConfigError, !accum || *accum == model, key, ": the gradients are ", dtype, " with it, but "
             "data_types.grad_accum_dtype says ", config::to_string(accum.value_or(model)),
             "; leave grad_accum_dtype unset or ", dtype);
}

// zero_optimization.compute_grad_norm false: no global norm at the step, so nothing may need one. DeepSpeed 0.19's
// rules, so a config moves between the two unchanged.
void check_compute_grad_norm(const config::Config& cfg) {
  const config::ZeroConfig& z = cfg.zero;
  if (z.compute_grad_norm) return;
  const std::string key = "zero_optimization.compute_grad_norm false";
  DS_CHECK_T(ConfigError, z.stage == 1 || z.stage == 2, key, ": supported only at ZeRO stage 1 or 2 (as in "
             "DeepSpeed), got stage ", z.stage);
  DS_CHECK_T(ConfigError, cfg.gradient_clipping == 0.0, key, ": clipping needs the norm; set gradient_clipping 0 "
             "(absent, it is DeepSpeed's default 1.0), got ", cfg.gradient_clipping);
  // (This covers ZenFlow too, which DeepSpeed also refuses here: it needs optimizer offload.)
  DS_CHECK_T(ConfigError, !z.offload_optimizer.enabled(), key, ": not supported with optimizer offload (as in "
             "DeepSpeed)");
  DS_CHECK_T(ConfigError, !(z.stage == 1 && cfg.bf16.enabled && cfg.data_types.grad_accum_dtype &&
                            *cfg.data_types.grad_accum_dtype == config::DataType::kFp32),
             key, ": not supported at stage 1 with bf16 parameters and data_types.grad_accum_dtype fp32 (DeepSpeed "
             "runs that combination on its BF16 optimizer, which always computes the norm)");
}

// The optimizer section's type against the rest of the config (a client optimizer is checked at initialize).
void check_optimizer_type(const config::Config& cfg) {
  if (!cfg.optimizer) return;
  const std::string& type = cfg.optimizer->type;
  // Older DeepSpeed configs name them (the parser reads their keys); 0.19 has none to cross checkpoints with.
  DS_CHECK_T(ConfigError, type != "onebitadam" && type != "zerooneadam" && type != "onebitlamb", "optimizer.type: '",
             type, "' (DeepSpeed's 1-bit Adam, 0/1 Adam and 1-bit LAMB) is not supported: DeepSpeed itself removed "
             "its 1-bit optimizers; use Adam, AdamW or Lamb");
  // LAMB's trust ratio and Muon's Newton-Schulz need each tensor whole at the step: the state in memory (no
  // slice-wise nvme step) and no step running beside the next iteration's collectives (overlap_step, SuperOffload;
  // ZenFlow, which runs AdamW, refuses any other optimizer above). (What only the model shows,
  // expert- or tensor-parallel tensors, the optimizer step's factory checks: runtime::make_optimizer_step.)
  if (type != "lamb" && type != "muon") return;
  const config::ZeroConfig& z = cfg.zero;
  const config::OffloadOptimizerConfig& oo = z.offload_optimizer;
  check_whole_tensor_step(type, oo.device == config::OffloadDevice::kNvme
                                    ? "zero_optimization.offload_optimizer.device nvme"
                                : oo.overlap_step  ? "zero_optimization.offload_optimizer.overlap_step"
                                : oo.super_offload ? "zero_optimization.offload_optimizer.super_offload"
                                                   : nullptr);  // (ZenFlow refused them already: it steps with AdamW)
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

// zero_optimization.offload_optimizer: devices, overlap and SuperOffload.
void check_offload_optimizer(const config::Config& cfg) {
  const auto& z = cfg.zero;
  const auto& oo = z.offload_optimizer;
  DS_CHECK_T(ConfigError, !oo.enabled() || z.stage >= 1,
             "zero_optimization.offload_optimizer: offloading the optimizer needs zero_optimization.stage 1, 2 or 3, "
             "got stage ", z.stage);
  DS_CHECK_T(ConfigError, oo.device != config::OffloadDevice::kCpu || !(oo.pipeline() || oo.fast_init),
             "zero_optimization.offload_optimizer: pipeline_read, pipeline_write and fast_init apply to device "
             "\"nvme\" only; remove them for device \"cpu\"");
  DS_CHECK_T(ConfigError, !oo.overlap_step || oo.device == config::OffloadDevice::kCpu,
             "zero_optimization.offload_optimizer.overlap_step: overlaps the CPU optimizer's step with the next "
             "step's forward and backward, so it needs offload_optimizer.device \"cpu\", got \"",
             config::to_string(oo.device), "\"");
  DS_CHECK_T(ConfigError, !oo.super_offload || (z.stage == 3 && oo.device == config::OffloadDevice::kCpu),
             "zero_optimization.offload_optimizer.super_offload: SuperOffload speculates the CPU optimizer's step of "
             "ZeRO stage 3 with offload_optimizer.device \"cpu\" (as in DeepSpeed), got stage ", z.stage,
             " and device \"", config::to_string(oo.device), "\"");
  // DeepSpeed reads it only for SuperOffload's CPU Adam worker; changed anywhere else it would do nothing.
  DS_CHECK_T(ConfigError,
             oo.super_offload || oo.cpuadam_cores_perc == config::OffloadOptimizerConfig{}.cpuadam_cores_perc,
             "zero_optimization.offload_optimizer.cpuadam_cores_perc: the share of the cores for SuperOffload's CPU "
             "optimizer worker, so it needs offload_optimizer.super_offload true (as in DeepSpeed); remove it");
  DS_CHECK_T(ConfigError, oo.cpuadam_cores_perc > 0.0,
             "zero_optimization.offload_optimizer.cpuadam_cores_perc must be in (0, 1] (DeepSpeed's range), got ",
             oo.cpuadam_cores_perc);
  DS_CHECK_T(ConfigError, !(oo.super_offload && oo.overlap_step),
             "zero_optimization.offload_optimizer: super_offload and overlap_step are two ways to hide the CPU step; "
             "choose one");
}

// zero_optimization.zenflow: what it runs with.
void check_zenflow(const config::Config& cfg) {
  const auto& z = cfg.zero;
  const auto& oo = z.offload_optimizer;
  if (!z.zenflow) return;
  const config::ZenFlowConfig& zf = *z.zenflow;
  DS_CHECK_T(ConfigError, oo.device == config::OffloadDevice::kCpu,
             "zero_optimization.zenflow: needs offload_optimizer.device \"cpu\" (the unselected columns take the CPU "
             "optimizer's step), got \"", config::to_string(oo.device), "\"");
  DS_CHECK_T(ConfigError, z.stage != 3 || z.offload_param.device != config::OffloadDevice::kNvme,
             "zero_optimization.zenflow: the selected values are written into the partitions in memory at every "
             "iteration; with offload_param \"nvme\" they live in swap files (use offload_param \"cpu\" or none)");
  DS_CHECK_T(ConfigError, !oo.super_offload,
             "zero_optimization.zenflow: ZenFlow and offload_optimizer.super_offload both reschedule the CPU "
             "step; choose one");
  DS_CHECK_T(ConfigError, !zf.update_interval || zf.auto_ratio == config::ZenFlowConfig{}.auto_ratio,
             "zero_optimization.zenflow.auto_ratio: tunes the adaptive window of update_interval \"auto\"; "
             "update_interval is ",
             zf.update_interval.value_or(0), " here");
  // Its selective AdamW (a config without an optimizer section is refused at initialize, where a client optimizer
  // would be), and the window it runs over.
  const char* key = "zero_optimization.zenflow";
  DS_CHECK_T(ConfigError, !cfg.optimizer || cfg.optimizer->type == "adam" || cfg.optimizer->type == "adamw", key,
             ": needs the config's Adam or AdamW optimizer (its selective update is AdamW's; the rest takes the CPU "
             "Adam step)");
  DS_CHECK_T(ConfigError, !cfg.optimizer || cfg.optimizer->params.get_bool("bias_correction", true), key,
             ": the selective AdamW corrects its moments' bias; optimizer.params.bias_correction false is not "
             "supported");
  DS_CHECK_T(ConfigError, !cfg.scheduler || cfg.scheduler->type != "OneCycle", key,
             ": OneCycle's momentum cycling is not applied to the selective AdamW; use another schedule");
  DS_CHECK_T(ConfigError, !cfg.gradient_accumulation_steps || *cfg.gradient_accumulation_steps == 1, key,
             ": update_interval takes the place of gradient_accumulation_steps (DeepSpeed sets one to the other); "
             "set gradient_accumulation_steps to 1, got ", cfg.gradient_accumulation_steps.value_or(1));
  DS_CHECK_T(ConfigError, !cfg.fp16.enabled, key, ": fp16 loss scaling is not supported with ZenFlow; use bf16");
}

// offload_param, the stage 1/2 keys and ZeRO++'s against the stage.
void check_partitioning_keys(const config::Config& cfg) {
  const auto& z = cfg.zero;
  const auto& op = z.offload_param;
  DS_CHECK_T(ConfigError, !op.enabled() || z.stage == 3,
             "zero_optimization.offload_param: offloading parameters needs zero_optimization.stage 3 (stages 0-2 "
             "keep whole parameters on every rank), got stage ", z.stage);
  // Stage 1/2 keys: honoured unless listed here.
  // (round_robin_gradients: a feature rule, with checkpoint.save_layout "python_deepspeed" only.)
  // sub_group_size without nvme offload: DeepSpeed steps stage 3's partition in sub-groups of this size (0: one per
  // parameter) and ignores it at stages 1-2; the values are the same as one step over the whole partition, which is
  // what we run, and a python_deepspeed checkpoint is cut into the same sub-groups (checkpoint/deepspeed_export.cc).
  DS_CHECK_T(ConfigError, z.zero_hpz_partition_size <= 1 || z.stage == 3,
             "zero_optimization.zero_hpz_partition_size: partitions stage 3's parameters a second time within a host "
             "(ZeRO++ hpZ), got stage ", z.stage);
  DS_CHECK_T(ConfigError, !z.zero_quantized_weights || z.stage == 3,
             "zero_optimization.zero_quantized_weights: quantizes stage 3's parameter all-gathers (ZeRO++ qwZ); stages "
             "0-2 gather no parameters, got stage ",
             z.stage);
  DS_CHECK_T(ConfigError, !z.zero_quantized_gradients || z.stage == 3,
             "zero_optimization.zero_quantized_gradients: quantizes stage 3's gradient reductions (ZeRO++ qgZ), got "
             "stage ",
             z.stage);
}

// The reduction op, autocast and the gradient accumulation dtype.
void check_precision_keys(const config::Config& cfg) {
  const auto& z = cfg.zero;
  // gradient_allreduce_op "sum": stages 0-2 reduce without averaging; DeepSpeed refuses it at stage 3 and with
  // ZenFlow, and so do we.
  if (cfg.gradient_allreduce_op == "sum") {
    DS_CHECK_T(ConfigError, z.stage != 3, "gradient_allreduce_op \"sum\": not supported at ZeRO stage 3 (as in "
               "DeepSpeed); use \"mean\"");
    DS_CHECK_T(ConfigError, !z.zenflow, "gradient_allreduce_op \"sum\": not supported with ZenFlow (as in "
               "DeepSpeed); use \"mean\"");
  }
  // data_types.grad_accum_dtype: fp32, or the model's own 16-bit dtype (zero/flat_params.h, stage3.h). Unset, we
  // accumulate in fp32 (DeepSpeed accumulates a bf16 model's gradients in bf16 unless told fp32).
  if (const auto& accum = cfg.data_types.grad_accum_dtype; accum && *accum != config::DataType::kFp32) {
    const config::DataType model = cfg.bf16.enabled   ? config::DataType::kBf16
                                   : cfg.fp16.enabled ? config::DataType::kFp16
                                                      : config::DataType::kFp32;
    const std::string key = std::string("data_types.grad_accum_dtype \"") + config::to_string(*accum) + "\"";
    DS_CHECK_T(ConfigError, *accum == model, key, ": gradients accumulate in fp32 or in the model's own dtype (",
               config::to_string(model), ")");
    DS_CHECK_T(ConfigError, !z.zenflow, key, ": ZenFlow selects and steps on fp32 gradients; not supported with it");
  }
}

// What the checkpoint layout, the pipeline section and the monitors may ask of deepspeed::initialize.
void check_engine_wide_keys(const config::Config& cfg) {
  check_python_layout(cfg);
  // The pipeline engine consumes the pipeline section before its stage engines see the config.
  DS_CHECK_T(ConfigError, !(cfg.pipeline.stages.has_value() && *cfg.pipeline.stages > 1),
             "pipeline.stages ", cfg.pipeline.stages.value_or(1),
             ": a pipeline is built with deepspeed::pipe::initialize from a PipelineModule, not deepspeed::initialize");
  DS_CHECK_T(ConfigError, !names_module_keys(cfg.pipeline),
             "pipeline: partition, seed_layers and activation_checkpoint_interval apply to a PipelineModule "
             "(deepspeed::pipe::initialize), not to deepspeed::initialize");
  DS_CHECK_T(ConfigError, !cfg.monitor.wandb.enabled,
             "wandb.enabled: Weights & Biases has no C++ client, so deepspeed-cpp cannot log to it; use csv_monitor "
             "(its files can be uploaded with wandb's own tools)");
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

std::string feature_rules_markdown() {
  return rules_markdown(feature_rules(),
                        [](const std::string& example) { check_config_alone(Config::from_string(example)); });
}

void check_whole_tensor_step(const std::string& type, const char* clash) {
  DS_CHECK_T(ConfigError, clash == nullptr, "optimizer.type: ",
             type == "lamb" ? "Lamb's per-tensor trust ratio" : "Muon's Newton-Schulz step on whole matrices",
             " is not supported with ", clash ? clash : "", " yet; use Adam/AdamW there");
}

void check_python_layout(const config::Config& cfg, const PythonLayoutModel* model) {
  if (!cfg.checkpoint.save_python_layout) return;
  const char* key = "checkpoint.save_layout: python_deepspeed";
  DS_CHECK_T(ConfigError, !cfg.fp16.enabled, key, " writes fp32 and bf16 checkpoints; fp16 is not supported");
  const bool adam = !cfg.optimizer || cfg.optimizer->type == "adam" || cfg.optimizer->type == "adamw";
  DS_CHECK_T(ConfigError, adam && (!model || model->adam_states), key,
             " needs the config's Adam or AdamW optimizer (DeepSpeed's files hold its exp_avg and exp_avg_sq)");
  DS_CHECK_T(ConfigError, !cfg.tensor_parallel.enabled() && !(model && model->tensor_parallel), key,
             " is not supported with tensor parallelism (tensor_parallel.autotp_size > 1)");
  // (round_robin_gradients with this layout: a feature rule above.)
  if (model)
    DS_CHECK_T(ConfigError, !model->experts && model->whole_world, key, " does not write MoE or pipeline checkpoints");
}

void check_supported_features(const config::Config& cfg) {
  apply_rules(feature_rules(), cfg);
  check_offload_optimizer(cfg);
  check_zenflow(cfg);
  check_partitioning_keys(cfg);
  check_model_dtype_masters(cfg);
  check_compute_grad_norm(cfg);
  check_optimizer_type(cfg);
  check_precision_keys(cfg);
  check_engine_wide_keys(cfg);
}

void check_pipeline_features(const config::Config& cfg) {
  DS_CHECK_T(ConfigError, cfg.zero.stage <= 1, "zero_optimization.stage ", cfg.zero.stage,
             " is not supported with pipeline parallelism (as in DeepSpeed): use stage 0 or 1");
  PythonLayoutModel pipeline;
  pipeline.whole_world = false;  // its stages write their own layer files
  check_python_layout(cfg, &pipeline);
  DS_CHECK_T(ConfigError, !cfg.autotuning.enabled || !cfg.autotuning.metric_path.has_value(),
             "autotuning: the autotuner tunes deepspeed::initialize runs; the pipeline engine does not report "
             "autotuning metrics (drop autotuning.metric_path)");
  // DeepSpeed's pipeline engine profiles through its stage modules' hooks; here a stage's forward is a stream of
  // instructions over micro-batches, which the flops profiler's per-step driver does not follow yet.
  DS_CHECK_T(ConfigError, !cfg.flops_profiler.enabled,
             "flops_profiler.enabled: the flops profiler is not supported by the pipeline engine yet; profile the "
             "model with deepspeed::initialize or deepspeed::profiling::FlopsProfiler");
  // partition and seed_layers belong to PipelineModuleOptions: the module is split before the config is read.
  const config::PipelineConfig& pc = cfg.pipeline;
  DS_CHECK_T(ConfigError, pc.partition == "best", "pipeline.partition \"", pc.partition,
             "\": set PipelineModuleOptions::partition_method instead (parameters, uniform, type:<regex>, boundaries)");
  DS_CHECK_T(ConfigError, !pc.seed_layers,
             "pipeline.seed_layers: set PipelineModuleOptions::base_seed instead (layers are built with the module)");
  DS_CHECK_T(ConfigError, cfg.sequence_parallel_size == 1,
             "sequence_parallel_size: Ulysses does not combine with pipeline parallelism yet");
  // The stages reduce tied weights' accumulated gradients in fp32 (accumulated_grad); DeepSpeed too accumulates a
  // pipeline's gradients in fp32 (its BF16_Optimizer) whatever grad_accum_dtype says.
  DS_CHECK_T(ConfigError, cfg.data_types.grad_accum_dtype.value_or(config::DataType::kFp32) == config::DataType::kFp32,
             "data_types.grad_accum_dtype \"", config::to_string(*cfg.data_types.grad_accum_dtype),
             "\": a pipeline accumulates its gradients in fp32 (as DeepSpeed's does); leave it unset or fp32");
  DS_CHECK_T(ConfigError, !cfg.bf16.bf16_master_weights_and_grads,
             "bf16.bf16_master_weights_and_grads: a pipeline keeps fp32 masters and gradients; not supported with it");
  DS_CHECK_T(ConfigError, !cfg.fp16.fp16_master_weights_and_grads,
             "fp16.fp16_master_weights_and_grads: a pipeline keeps fp32 masters and gradients; not supported with it");
}

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
