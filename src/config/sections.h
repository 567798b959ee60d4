// Parse and dump functions for each section of a DeepSpeed config, one pair per file
// (zero_config.cc, precision_config.cc, ...). Parsing and dumping sit side by side so the JSON keys
// of a section are spelled in one place. `autos` collects JSON paths given as "auto".
// Stateless functions; thread-safe.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "config/json_reader.h"
#include "deepspeed/config.h"

namespace deepspeed::config {

ZeroConfig parse_zero_config(const Json& node, std::set<std::string>* autos);
OrderedJson dump_zero_config(const ZeroConfig& zero);

Fp16Config parse_fp16_config(const Json& node, std::set<std::string>* autos);
OrderedJson dump_fp16_config(const Fp16Config& fp16);
// `path` is "bf16" or its old name "bfloat16".
Bf16Config parse_bf16_config(const Json& node, const std::string& path,
                             std::set<std::string>* autos);
OrderedJson dump_bf16_config(const Bf16Config& bf16);
DataTypesConfig parse_data_types_config(const Json& node);
OrderedJson dump_data_types_config(const DataTypesConfig& data_types);
// "fp16" / "bf16" / "fp32", case-insensitive as in DeepSpeed.
DataType parse_data_type(const Json& value, const std::string& path);

OptimizerConfig parse_optimizer_config(const Json& node);
OrderedJson dump_optimizer_config(const OptimizerConfig& optimizer);
SchedulerConfig parse_scheduler_config(const Json& node);
OrderedJson dump_scheduler_config(const SchedulerConfig& scheduler);

AioConfig parse_aio_config(const Json& node);
OrderedJson dump_aio_config(const AioConfig& aio);
ActivationCheckpointingConfig parse_activation_checkpointing_config(const Json& node);
OrderedJson dump_activation_checkpointing_config(const ActivationCheckpointingConfig& ac);
PipelineConfig parse_pipeline_config(const Json& node);
OrderedJson dump_pipeline_config(const PipelineConfig& pipeline);
CheckpointConfig parse_checkpoint_config(const Json& node);
OrderedJson dump_checkpoint_config(const CheckpointConfig& checkpoint);

TensorParallelConfig parse_tensor_parallel_config(const Json& node);
OrderedJson dump_tensor_parallel_config(const TensorParallelConfig& tp);
CommsLoggerConfig parse_comms_logger_config(const Json& node);
OrderedJson dump_comms_logger_config(const CommsLoggerConfig& comms);
// `key` is "tensorboard" or "csv_monitor".
FileMonitorConfig parse_file_monitor_config(const Json& node, const std::string& key);
OrderedJson dump_file_monitor_config(const FileMonitorConfig& monitor);
WandbConfig parse_wandb_config(const Json& node);
OrderedJson dump_wandb_config(const WandbConfig& wandb);
FlopsProfilerConfig parse_flops_profiler_config(const Json& node);
OrderedJson dump_flops_profiler_config(const FlopsProfilerConfig& profiler);

AutotuningConfig parse_autotuning_config(const Json& node);
OrderedJson dump_autotuning_config(const AutotuningConfig& autotuning);

// Sets the dotted path of "path=value" in `root` (overrides.cc); ConfigError names the assignment.
void apply_override(Json* root, const std::string& assignment);

// DeepSpeed's default of an optimizer's or scheduler's parameter (`section` is "optimizer" or
// "scheduler", `type` canonical), or null when it has none.
std::optional<ParamValue> default_param(const std::string& section, const std::string& type,
                                        const std::string& name);

// Checks that span sections, as DeepSpeed's _do_error_check does (config.cc): at parse, and again in
// resolve_auto once "auto" precision flags are filled.
void check_consistency(const Config& config);

// Refuses, by JSON path, values of keys that select behaviour deepspeed-cpp implements one way only
// (implemented_values.cc).
void check_implemented_values(const Config& config);

// Shared by the dump functions: an optional as its value or null.
template <typename T>
OrderedJson optional_json(const std::optional<T>& value) {
  return value ? OrderedJson(*value) : OrderedJson(nullptr);
}

}  // namespace deepspeed::config
