// The sections of a DeepSpeed config, one file each (zero_config.cc, precision_config.cc, ...): each is a table of
// its keys (key_table.h) from which parsing, dumping and the key catalogue all come, so a key is spelled once.
// Built once; thread-safe.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "config/key_table.h"
#include "deepspeed/config.h"

namespace deepspeed::config {

// Each section's table (key_table.h): its keys, how they are read and written back, and what they mean.
const Section<ZeroConfig>& zero_section();
const Section<Fp16Config>& fp16_section();
const Section<Bf16Config>& bf16_section();  // also read under its old name "bfloat16"
const Section<DataTypesConfig>& data_types_section();
const Section<AioConfig>& aio_section();
const Section<ActivationCheckpointingConfig>& activation_checkpointing_section();
const Section<PipelineConfig>& pipeline_section();
const Section<CheckpointConfig>& checkpoint_section();
const Section<CommsLoggerConfig>& comms_logger_section();
const Section<FileMonitorConfig>& file_monitor_section();  // tensorboard and csv_monitor
const Section<WandbConfig>& wandb_section();
const Section<FlopsProfilerConfig>& flops_profiler_section();
const Section<AutotuningConfig>& autotuning_section();
const Section<TensorParallelConfig>& tensor_parallel_section();
const Section<DataEfficiencyConfig>& data_efficiency_section();
// DeepSpeed < 0.19.8's top-level curriculum_learning, read into data_efficiency (never dumped).
Field<Config> legacy_curriculum_key();
// The top level: its own keys and every section above, so Config's parse, dump and key catalogue.
const Section<Config>& config_section();

// "fp16" / "bf16" / "fp32", case-insensitive as in DeepSpeed.
DataType parse_data_type(const Json& value, const std::string& path);

// Sections whose parameters depend on the type (optimizer, scheduler): parsed and dumped by their own functions
// (params.cc holds DeepSpeed's defaults per type), listed in the table as one key each.
OptimizerConfig parse_optimizer_config(const Json& node);
OrderedJson dump_optimizer_config(const OptimizerConfig& optimizer);
SchedulerConfig parse_scheduler_config(const Json& node);
// Their keys for the catalogue: type, and each parameter with DeepSpeed's default per type.
std::vector<KeyInfo> optimizer_catalogue(const std::string& prefix);
std::vector<KeyInfo> scheduler_catalogue(const std::string& prefix);
OrderedJson dump_scheduler_config(const SchedulerConfig& scheduler);

// Sets the dotted path of "path=value" in `root` (overrides.cc); ConfigError names the assignment.
void apply_override(Json* root, const std::string& assignment);

// DeepSpeed's default of an optimizer's or scheduler's parameter (`section` is "optimizer" or
// "scheduler", `type` canonical), or null when it has none.
std::optional<ParamValue> default_param(const std::string& section, const std::string& type,
                                        const std::string& name);

// Checks that span sections, as DeepSpeed's _do_error_check does (config.cc): at parse, and again in
// resolve_auto once "auto" precision flags are filled.
void check_consistency(const Config& config);

}  // namespace deepspeed::config
