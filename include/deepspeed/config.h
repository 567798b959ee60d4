// A DeepSpeed JSON config as typed, validated C++ structs.
//
//   auto cfg = deepspeed::Config::from_file("ds_config.json");  // parse + validate, defaults
//   filled cfg.resolve_batch(dp_world_size);                              // after comm init if
//   (cfg.zero.stage == 3 && cfg.zero.offload_param.enabled()) ...
//
// Keys, defaults and "auto" semantics are DeepSpeed's. Every problem is a deepspeed::ConfigError
// whose message starts with the JSON path (`zero_optimization.stage: expected an integer in 0..3,
// got 5`). An unknown key is refused with a did-you-mean suggestion where DeepSpeed refuses it (its pydantic
// sections: zero_optimization, fp16, bf16, the monitors, ...) and named in warnings() where DeepSpeed goes on past
// it (its top level and the sections it reads as plain dicts); never silently ignored.
// DeepSpeed features this build does not implement are accepted only when absent or `"enabled":
// false`.
//
// "auto" (HuggingFace's integration): the batch keys treat it as "not given" and the arithmetic
// solves them; elsewhere the field keeps DeepSpeed's default and its JSON path is listed in
// `auto_keys()` (optimizer and scheduler params: ParamValue::is_auto) until `resolve_auto`, which
// initialize calls with InitializeOptions::auto_values, fills it from what the program knows or
// refuses it by name (config/auto_values.h).
// A Config is a plain value: copy it freely; do not mutate one from several threads.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/config/auto_values.h"
#include "deepspeed/config/autotuning_config.h"
#include "deepspeed/config/batch_config.h"
#include "deepspeed/config/data_efficiency_config.h"
#include "deepspeed/config/feature_config.h"
#include "deepspeed/config/optimizer_config.h"
#include "deepspeed/config/params.h"
#include "deepspeed/config/precision_config.h"
#include "deepspeed/config/zero_config.h"
#include "deepspeed/error.h"

namespace deepspeed::config {

struct Config {
  // Batch keys as given (unset or "auto": solved by resolve_batch).
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> train_micro_batch_size_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;
  int dp_world_size = 0;  // set by resolve_batch; 0 until then

  int steps_per_print = 10;
  // Max global gradient norm; 0 disables clipping. DeepSpeed 0.19 clips at 1.0 when the key is absent: so do we.
  double gradient_clipping = 1.0;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  bool dump_state = false;
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  bool sparse_gradients = false;
  bool disable_allgather = false;
  bool dataloader_drop_last = true;  // DeepSpeed: false; ours always drops (false is refused)
  bool graph_harvesting = false;
  bool use_data_before_expert_parallelism = false;
  // DeepSpeed 0.19: "mean" (average over the data-parallel ranks) or "sum" (add them: no division by the world
  // size, prescale_gradients and gradient_predivide_factor unused; stages 0-2, not with ZenFlow).
  std::string gradient_allreduce_op = "mean";
  // DeepSpeed 0.19: false hands gradient accumulation to the caller (refused: the engine always accumulates).
  bool managed_gradient_accumulation = true;
  std::optional<int64_t> seed;  // not a DeepSpeed key: deepspeed-cpp seeds its RNGs with it
  std::optional<int64_t> vocabulary_size;
  std::optional<DataType> communication_data_type;  // unset: decided by the precision in use
  DataType seq_parallel_communication_data_type = DataType::kFp32;
  bool zero_allow_untested_optimizer = false;
  bool zero_force_ds_cpu_optimizer = true;

  std::optional<OptimizerConfig> optimizer;
  std::optional<SchedulerConfig> scheduler;
  Fp16Config fp16;
  Bf16Config bf16;
  DataTypesConfig data_types;
  ZeroConfig zero;  // JSON: zero_optimization
  AioConfig aio;
  ActivationCheckpointingConfig activation_checkpointing;
  PipelineConfig pipeline;
  CheckpointConfig checkpoint;
  CommsLoggerConfig comms_logger;
  MonitorConfig monitor;  // JSON: tensorboard, csv_monitor, wandb
  FlopsProfilerConfig flops_profiler;
  AutotuningConfig autotuning;
  TensorParallelConfig tensor_parallel;
  DataEfficiencyConfig data_efficiency;  // also read from the pre-0.19.8 top-level curriculum_learning
  // Ulysses sequence parallelism (DeepSpeed's top-level key): ranks that split each sequence; 1 is off.
  int sequence_parallel_size = 1;

  // Parse and validate. `from_file` names the file in I/O and JSON syntax errors
  // (`ds_config.json:3:14: invalid JSON: ...`); from_string uses `<string>`.
  static Config from_file(const std::string& path);
  static Config from_string(const std::string& json_text);
  // As from_file, with `overrides` applied to the file's JSON before validation, as
  // ds_check_config --set: each is a dotted JSON path, '=', and a value read as JSON if it is JSON
  // and as a plain string otherwise ("optimizer.params.lr=3e-4", "optimizer.type=AdamW").
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides);

  // Solves the batch arithmetic for a data-parallel world size (known after comm init) and fills
  // all three batch keys. Throws ConfigError on missing, inconsistent or non-divisible values.
  // A batch key given as "auto" that neither of the other two can solve is named as such.
  void resolve_batch(int dp_world_size);
  Config resolved(int dp_world_size) const;
  bool batch_resolved() const { return dp_world_size > 0; }

  // Replaces every "auto" outside the batch keys from `known` as config/auto_values.h lists, and
  // returns what each became. Throws ConfigError naming the first "auto" it cannot fill (and the
  // others left), with what to put there instead; the config is unchanged then.
  std::vector<AutoResolution> resolve_auto(const AutoValues& known);

  // Batch keys given as "auto" ("train_batch_size", ...), solved or not.
  const std::set<std::string>& auto_batch_keys() const { return auto_batch_keys_; }

  // JSON paths still set to "auto" (not counting batch keys or optimizer/scheduler params,
  // whose "auto" lives in ParamValue), e.g. "zero_optimization.reduce_bucket_size".
  const std::set<std::string>& auto_keys() const { return auto_keys_; }
  bool is_auto(const std::string& json_path) const { return auto_keys_.count(json_path) != 0; }
  // Call after setting the field to its resolved value.
  void clear_auto(const std::string& json_path) { auto_keys_.erase(json_path); }
  // A batch key's path goes to auto_batch_keys(), any other to auto_keys().
  void mark_auto(const std::string& json_path);

  // The whole config as DeepSpeed JSON with every default filled and keys still "auto" written as
  // "auto"; `from_string(dump())` gives back an equal config. indent < 0 gives one line.
  std::string dump(int indent = 2) const;

  // What the parse went on past, one line each: keys DeepSpeed ignores (an unknown top-level key such as
  // "_comment" or another tool's section, an unknown key in a section DeepSpeed reads as a plain dict), named by
  // JSON path (and the file, for from_file). initialize() prints them on rank 0, ds_check_config on stderr.
  const std::vector<std::string>& warnings() const { return warnings_; }
  void add_warning(std::string line) { warnings_.push_back(std::move(line)); }
  void name_warnings_after(const std::string& file) {
    for (std::string& w : warnings_) w = file + ": " + w;
  }

  // Convenience views DeepSpeed's engine also offers.
  int zero_optimization_stage() const { return zero.stage; }
  bool zero_enabled() const { return zero.stage > 0; }

 private:
  std::set<std::string> auto_keys_;
  std::set<std::string> auto_batch_keys_;
  std::vector<std::string> warnings_;
};

}  // namespace deepspeed::config

namespace deepspeed {
using config::Config;
}  // namespace deepspeed
