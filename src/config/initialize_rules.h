// The rules that need what deepspeed::initialize sees besides the config: the job's ranks, the groups, optimizer and
// scheduler the program passes, the experts the model has. The same kind of table as the config's own rules
// (rule_table.h), each row with an example config and the facts it refuses under, marked with the phase of
// initialize that runs it; ds_check_config cannot see these facts, so the README lists them apart
// (`ds_check_config --rules_markdown initialize`). Thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "deepspeed/config.h"

namespace deepspeed::config {

// What initialize knows besides the config when a phase runs (later phases know more).
struct InitializeFacts {
  int world = 1;                    // ranks in the job
  int local_world = 1;              // ranks on this host (LOCAL_WORLD_SIZE)
  bool caller_groups = false;       // InitializeOptions::data_parallel_group or model_parallel_group given
  bool caller_splits_data = false;  // those groups make the data-parallel group smaller than the world
  bool model_parallel = false;      // a model-parallel group of more than one rank
  bool tensor_parallel = false;     // the model's layers are tensor-parallel
  bool norm_excluded = false;       // InitializeOptions::norm_excluded_params given
  bool whole_world = true;          // the data-parallel group is the world (no pipeline, no caller layout)
  bool client_optimizer = false;    // InitializeOptions::optimizer given
  bool client_scheduler = false;    // InitializeOptions::lr_scheduler given
  // The model's own parallel layers, before any transform.
  int layers_split = 0;  // ranks the model's (a stage's) deepspeed::tp layers are split over (0: none)
  int model_sp = 0;      // ranks its sequence::DistributedAttention layers split sequences over (0: none)
  // pipe::initialize: the PipelineModule's topology.
  int pipeline_stages = 0;             // the topology's "pipe" axis (0: not a pipeline)
  int model_axis = 1;                  // the topology's "model" axis
  bool model_axis_is_tp_group = true;  // the "model" axis groups the same ranks as the layers' group
};

enum class InitializePhase {
  kDegrees,    // before any transform changes the model (runtime::check_degrees)
  kModel,      // the model's own tensor- and sequence-parallel layers, before AutoTP (runtime::make_layout)
  kLayout,     // once the groups are laid out (runtime::make_layout)
  kExperts,    // when the model has MoE experts with ep_size > 1 (runtime::add_experts)
  kOptimizer,  // before the optimizer is built (initialize; runtime::make_optimizer_step)
  kPipeline,   // pipe::initialize, once the module's topology is known (before the stage engine is built)
};

struct InitializeRule {
  InitializePhase phase;
  std::string key;      // the JSON path (or "initialize") the refusal names
  std::string when;     // when it is refused, in words (README)
  std::string example;  // a config it refuses under `facts`
  InitializeFacts facts;
  std::function<bool(const Config&, const InitializeFacts&)> refused;
  std::function<std::string(const Config&, const InitializeFacts&)> message;
};

const std::vector<InitializeRule>& initialize_rules();

// Throws ConfigError with the message of the first rule of `phase` that `config` and `facts` break.
void apply_initialize_rules(InitializePhase phase, const Config& config, const InitializeFacts& facts);

// The README's table of these rules: phase, key, when, and the message each rule's example gets.
std::string initialize_rules_markdown();

}  // namespace deepspeed::config
