// Smaller runtime sections: `aio` (NVMe swap I/O), `activation_checkpointing`, `pipeline`,
// `checkpoint`, `comms_logger`, the monitors (`tensorboard`, `csv_monitor`, `wandb`) and
// `flops_profiler`. Defaults equal DeepSpeed's except checkpoint.tag_validation (see there).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepspeed::config {

struct AioConfig {
  int64_t block_size = 1048576;
  int queue_depth = 8;
  int thread_count = 1;  // newer DeepSpeed calls it `intra_op_parallelism`; both keys accepted
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
  bool cpu_checkpointing = false;
  std::optional<int> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

struct PipelineConfig {
  std::optional<int> stages;  // unset: "auto" (taken from the PipelineModule)
  std::string partition = "best";
  bool seed_layers = false;
  int activation_checkpoint_interval = 0;
  bool pipe_partitioned = true;
  bool grad_partitioned = true;
};

enum class TagValidation { kIgnore, kWarn, kFail };
const char* to_string(TagValidation mode);  // "Ignore", "Warn", "Fail"

struct CheckpointConfig {
  // DeepSpeed's default is Warn; deepspeed-cpp always checks the tag and fails on a mismatch, so
  // this is Fail and Warn / Ignore are refused.
  TagValidation tag_validation = TagValidation::kFail;
  bool load_universal = false;
  bool use_node_local_storage = false;
  bool parallel_write_pipeline_stage = false;  // JSON: parallel_write.pipeline_stage
  // JSON save_layout: "deepspeed_cpp" (default: ours, loadable at any world size and stage) or "python_deepspeed"
  // (Python DeepSpeed's own layout for this world size and stage, which its load_checkpoint and zero_to_fp32.py
  // read; fp32/bf16 Adam, no MoE or pipeline). Not a DeepSpeed key: Python DeepSpeed ignores it.
  bool save_python_layout = false;
};

struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  bool debug = false;
  std::vector<std::string> prof_ops;
};

// `tensorboard` and `csv_monitor` share this shape.
struct FileMonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct WandbConfig {
  bool enabled = false;
  std::optional<std::string> group;
  std::optional<std::string> team;
  std::string project = "deepspeed";
};

struct MonitorConfig {
  FileMonitorConfig tensorboard;
  FileMonitorConfig csv_monitor;
  WandbConfig wandb;

  bool enabled() const { return tensorboard.enabled || csv_monitor.enabled || wandb.enabled; }
};

struct FlopsProfilerConfig {
  bool enabled = false;
  double recompute_fwd_factor = 0.0;
  int profile_step = 1;
  int module_depth = -1;
  int top_modules = 1;
  bool detailed = true;
  std::optional<std::string> output_file;  // unset: stdout
};

// tensor_parallel.partition_config.layer_specs[i] (DeepSpeed's TPLayerSpec).
struct TpLayerSpecConfig {
  std::vector<std::string> patterns;   // regexes searched in parameter names ("<module path>.weight")
  std::string partition_type = "column";  // column, row, skip (DeepSpeed's), or vocab (ours: an embedding's rows)
  int64_t fused_parts = 1;             // from "shape": [k, -1] (k equal blocks fused along the output)
  bool gather_output = false;
};

// tensor_parallel (DeepSpeed's TPTrainingConfig): AutoTP training over autotp_size ranks. What DeepSpeed offers
// here that deepspeed-cpp does not (preset_model, kernel injection, keeping the module on the host, the liger CE
// backend) is refused at parse time by name.
struct TensorParallelConfig {
  int autotp_size = 0;  // 0 or 1: off
  bool tp_overlap_comm = false;  // column-parallel backward overlaps the input gradient's all-reduce (needs size > 1)
  std::optional<std::string> dtype;  // DeepSpeed's model dtype; must agree with fp16 / bf16 (fp32 without either)
  std::optional<bool> vocab_parallel_lm_head;  // false: the LM head stays whole; unset or true: vocab-parallel
  // partition_config
  bool use_default_specs = true;  // the built-in layer names after the given specs
  bool strict_mode = true;        // false: a Linear / Embedding no spec names stays whole instead of an error
  std::vector<TpLayerSpecConfig> layer_specs;
  std::vector<std::string> lm_head_patterns;  // layer names of the LM head (vocab-parallel unless the head stays)
  bool enabled() const { return autotp_size > 1; }
};

}  // namespace deepspeed::config
