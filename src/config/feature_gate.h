// Rejects, at initialize(), every config feature this build parses but does not implement yet, with a message
// naming the key and the work that will bring it. Nothing in a config is ever silently ignored.
#pragma once

#include <string>

#include "config/rule_table.h"
#include "deepspeed/config.h"

namespace deepspeed::config {

// Features DeepSpeed has and this build does not yet: each refused by the key that asks for it, "<key>: <feature> is
// not implemented in this build of deepspeed-cpp yet". Run first by check_supported_features; the README's table is
// feature_rules_markdown().
const std::vector<Rule>& feature_rules();
std::string feature_rules_markdown();

// What a key asks for against the rest of the config (devices, stages, ZenFlow, 16-bit masters, the gradient norm,
// the optimizer, the checkpoint layout, the pipeline section), each with its own message; run after the feature
// rules. The parts live in combination_rules.cc and precision_rules.cc; the README's table is
// combination_rules_markdown().
const std::vector<Rule>& combination_rules();
std::vector<Rule> offload_and_zenflow_rules();
std::vector<Rule> precision_and_optimizer_rules();
std::string combination_rules_markdown();

// Tensor and sequence parallelism against the config (AutoTP's stages, Ulysses beside AutoTP): part of the
// combination rules, and run again by runtime::check_degrees before any transform changes the model.
const std::vector<Rule>& parallel_rules();

// pipe::initialize's rules for the config alone (check_pipeline_features); README: pipeline_rules_markdown().
const std::vector<Rule>& pipeline_rules();
std::string pipeline_rules_markdown();

// Throws ConfigError for the first unsupported feature that `cfg` turns on: the feature rules, then the combination
// rules.
void check_supported_features(const config::Config& cfg);

// Tensor and sequence parallelism against the config (AutoTP's stages, Ulysses beside AutoTP): part of the
// combination rules, and run again by runtime::check_degrees before any transform changes the model.
const std::vector<Rule>& parallel_rules();

// pipe::initialize's rules for the config alone (ZeRO stage 0-1, the pipeline section's keys that belong to the
// PipelineModule, features the pipeline engine lacks); its stage engines then run the gate above without the
// pipeline section.
void check_pipeline_features(const config::Config& cfg);

// What the engines refuse from the config alone, as ds_check_config checks it: a pipeline config (pipeline.stages
// > 1, or a pipeline key only a PipelineModule takes) by pipe::initialize's rules and its stage engines' gate, any
// other by deepspeed::initialize's gate. The engines check more once they see the model and the optimizer's
// parameters.
void check_config_alone(const config::Config& cfg);

// Rules with a half that only initialize can check (it needs the model or the built optimizer). Each is written once,
// here; the gate above runs the config's half, the engine calls again with what it sees.

// Lamb's trust ratio and Muon's Newton-Schulz need each tensor whole at the step: refused when `clash` (the key or
// the model's feature that splits or streams tensors) is not null.
void check_whole_tensor_step(const std::string& type, const char* clash);

// The activation_checkpointing section's own preconditions: "" when they hold, else the message. Not a gate rule:
// DeepSpeed asserts them only in deepspeed.checkpointing.configure, and its config accepts them (real configs carry
// contiguous_memory_optimization without number_checkpoints), so checkpointing::configure checks them.
std::string activation_checkpointing_problem(const ActivationCheckpointingConfig& s);

// ZenFlow's selection interval, in iterations, against a fixed update_interval: "" or the message. The gate's rule
// uses it; runtime::ZenFlowSchedule computes the same interval.
int64_t zenflow_select_iterations(const ZenFlowConfig& c);
std::string zenflow_schedule_problem(const ZenFlowConfig& c);
std::string whole_tensor_message(const std::string& type, const char* clash);
// ZenFlow's refusal of any optimizer but the config's Adam/AdamW (another type here; a client one or none at
// initialize).
std::string zenflow_needs_adam_message();

// What Python DeepSpeed's checkpoint files can hold, for checkpoint.save_layout "python_deepspeed"
// (checkpoint/deepspeed_export.h). The config's half without `model`; initialize adds what it built.
struct PythonLayoutModel {
  bool experts = false;          // MoE experts
  bool whole_world = true;       // one data-parallel group over the world (no pipeline or custom layout)
  bool adam_states = true;       // the optimizer keeps Adam's exp_avg and exp_avg_sq (a client optimizer may not)
  bool tensor_parallel = false;  // tensor-parallel layers, from the config or the model
};
void check_python_layout(const config::Config& cfg, const PythonLayoutModel* model = nullptr);

}  // namespace deepspeed::config
